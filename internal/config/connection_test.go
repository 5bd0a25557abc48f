package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestTLSFilesAreCheckedAtValidation (issue 24, item 12): a TLS file that
// does not exist or holds no valid PEM passed validation and failed at
// the first connection, exit 1, without the key's name. Validation now
// reads the files of an enabled section: each bad one is a FieldError
// (ErrInvalid: exit 2 in every binary) naming its key and file, wrapping
// os.ErrNotExist for a missing one. Valid files pass.
func TestTLSFilesAreCheckedAtValidation(t *testing.T) {
	t.Parallel()
	pki, other := testenv.NewPKI(t), testenv.NewPKI(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, c := range []struct {
		name     string
		etcd     bool
		tls      config.TLSConfig
		want     []string // one error each, in order; none: valid
		notExist bool
	}{
		{"valid", false, config.TLSConfig{Enabled: true, CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}, nil, false},
		{"valid, etcd", true, config.TLSConfig{Enabled: true, CAFile: pki.CA}, nil, false},
		{"missing ca_file", false, config.TLSConfig{Enabled: true, CAFile: missing},
			[]string{"config: redis.tls.ca_file: open " + missing + ": no such file or directory"}, true},
		{"missing ca_file, etcd", true, config.TLSConfig{Enabled: true, CAFile: missing},
			[]string{"config: etcd.tls.ca_file: open " + missing + ": no such file or directory"}, true},
		{"ca_file not PEM", false, config.TLSConfig{Enabled: true, CAFile: garbage},
			[]string{"config: redis.tls.ca_file: " + garbage + " holds no PEM certificate"}, false},
		{"missing cert_file", false, config.TLSConfig{Enabled: true, CertFile: missing, KeyFile: pki.ClientKey},
			[]string{"config: redis.tls.cert_file: open " + missing + ": no such file or directory"}, true},
		{"cert_file not PEM", false, config.TLSConfig{Enabled: true, CertFile: garbage, KeyFile: pki.ClientKey},
			[]string{"config: redis.tls.cert_file: " + garbage + ": no PEM certificate found"}, false},
		{"cert_file a key", false, config.TLSConfig{Enabled: true, CertFile: pki.ClientKey, KeyFile: pki.ClientKey},
			[]string{"config: redis.tls.cert_file: " + pki.ClientKey + ": no PEM certificate found"}, false},
		{"missing key_file", true, config.TLSConfig{Enabled: true, CertFile: pki.ClientCert, KeyFile: missing},
			[]string{"config: etcd.tls.key_file: open " + missing + ": no such file or directory"}, true},
		{"key_file not PEM", false, config.TLSConfig{Enabled: true, CertFile: pki.ClientCert, KeyFile: garbage},
			[]string{"config: redis.tls.key_file: " + garbage + " (for redis.tls.cert_file " + pki.ClientCert + "): tls: failed to find any PEM data in key input"}, false},
		{"key_file of another certificate", false, config.TLSConfig{Enabled: true, CertFile: pki.ClientCert, KeyFile: other.ClientKey},
			[]string{"config: redis.tls.key_file: " + other.ClientKey + " (for redis.tls.cert_file " + pki.ClientCert + "): tls: private key does not match public key"}, false},
		{"every file bad", false, config.TLSConfig{Enabled: true, CAFile: garbage, CertFile: missing, KeyFile: missing},
			[]string{"config: redis.tls.ca_file: ", "config: redis.tls.cert_file: ", "config: redis.tls.key_file: "}, true},
	} {
		cfg := config.Default()
		if c.etcd {
			cfg.Etcd.TLS = c.tls
		} else {
			cfg.Redis.TLS = c.tls
		}
		err := cfg.Validate()
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		lines := []string{}
		if err != nil {
			lines = strings.Split(err.Error(), "\n")
		}
		ok := len(lines) == len(c.want) && errors.Is(err, config.ErrInvalid) && errors.Is(err, os.ErrNotExist) == c.notExist
		for k := 0; ok && k < len(lines); k++ {
			ok = strings.HasPrefix(lines[k], c.want[k]) && (len(c.want) > 1 || lines[k] == c.want[k])
		}
		if !ok {
			t.Errorf("%s: got\n%v\nwant\n%s\n(ErrNotExist %v)", c.name, err, strings.Join(c.want, "\n"), c.notExist)
		}
	}
}
