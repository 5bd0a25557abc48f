package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"
)

// Redis topologies (RedisConfig.Mode).
const (
	// RedisStandalone is one server (with replicas or not) at Addr.
	RedisStandalone = "standalone"
	// RedisSentinel is a primary found through the Sentinels at Addrs,
	// followed across failovers.
	RedisSentinel = "sentinel"
	// RedisCluster is a Redis Cluster reached through the seed nodes at
	// Addrs; each shard's keys live in the slot of its hash tag.
	RedisCluster = "cluster"
)

// RedisConfig configures the connection to Redis: a standalone server,
// a primary watched by Sentinels, or a Redis Cluster.
type RedisConfig struct {
	// Mode is the topology.
	Mode string `koanf:"mode"`
	// Addr is the standalone server's host:port. In the other modes it
	// must be left at its default or empty.
	Addr string `koanf:"addr"`
	// Addrs are host:port addresses: the Sentinels (mode sentinel) or
	// some of the cluster's nodes, from which the rest is discovered
	// (mode cluster).
	Addrs []string `koanf:"addrs"`
	// MasterName is the name the Sentinels monitor the primary under
	// (mode sentinel).
	MasterName string `koanf:"master_name"`
	// SentinelUsername and SentinelPassword authenticate to the
	// Sentinels themselves when they require it (mode sentinel); the
	// password is a secret.
	SentinelUsername string `koanf:"sentinel_username"`
	SentinelPassword string `koanf:"sentinel_password"`
	// Username is the ACL user of the data nodes; empty means the
	// default user.
	Username string `koanf:"username"`
	// Password is the ACL user's password or the AUTH password. Secret.
	Password string `koanf:"password"`
	// DB is the logical database (always 0 on a cluster).
	DB int `koanf:"db"`
	// TLS configures TLS to every server: the data nodes and, in mode
	// sentinel, the Sentinels.
	TLS TLSConfig `koanf:"tls"`
	// PoolSize is the maximum number of connections (per node on a
	// cluster).
	PoolSize int `koanf:"pool_size"`
	// DialTimeout bounds establishing a connection.
	DialTimeout time.Duration `koanf:"dial_timeout"`
}

// EtcdConfig configures the connection to an etcd cluster.
type EtcdConfig struct {
	// Endpoints are the client URLs of the cluster members.
	Endpoints []string `koanf:"endpoints"`
	// Username is the etcd user; empty disables authentication.
	Username string `koanf:"username"`
	// Password is the etcd user's password. Secret.
	Password string `koanf:"password"`
	// TLS configures TLS to the cluster.
	TLS TLSConfig `koanf:"tls"`
	// DialTimeout bounds fetching an auth token and similar start-up
	// calls.
	DialTimeout time.Duration `koanf:"dial_timeout"`
}

// TLSConfig configures a TLS client. All fields but Enabled must be
// empty when Enabled is false.
type TLSConfig struct {
	// Enabled turns TLS on.
	Enabled bool `koanf:"enabled"`
	// CAFile is a PEM file of certificate authorities that verify the
	// server; empty means the system's roots.
	CAFile string `koanf:"ca_file"`
	// CertFile is the PEM client certificate. Set with KeyFile or not at
	// all.
	CertFile string `koanf:"cert_file"`
	// KeyFile is the PEM private key of CertFile.
	KeyFile string `koanf:"key_file"`
	// ServerName overrides the host name verified in the server's
	// certificate.
	ServerName string `koanf:"server_name"`
	// InsecureSkipVerify disables verification of the server's
	// certificate. For tests only.
	InsecureSkipVerify bool `koanf:"insecure_skip_verify"`
}

// maxRedisDB is the highest logical database of a default Redis server.
const maxRedisDB = 15

// defaultRedisAddr is redis.addr's default.
const defaultRedisAddr = "127.0.0.1:6379"

func defaultRedis() RedisConfig {
	return RedisConfig{Mode: RedisStandalone, Addr: defaultRedisAddr, Addrs: []string{}, DialTimeout: 5 * time.Second}
}

func defaultEtcd() EtcdConfig {
	return EtcdConfig{Endpoints: []string{"http://127.0.0.1:2379"}, DialTimeout: 5 * time.Second}
}

func (v *validator) redis(r RedisConfig) {
	switch r.Mode {
	case RedisStandalone:
		v.hostPort("redis.addr", r.Addr, true)
		if len(r.Addrs) > 0 {
			v.add("redis.addrs", "is for modes sentinel and cluster; mode standalone uses redis.addr")
		}
	case RedisSentinel, RedisCluster:
		if r.Addr != "" && r.Addr != defaultRedisAddr {
			v.add("redis.addr", "is for mode standalone; mode %s uses redis.addrs", r.Mode)
		}
		if len(r.Addrs) == 0 {
			v.add("redis.addrs", "at least one address is required in mode %s", r.Mode)
		}
		for i, a := range r.Addrs {
			v.hostPort(fmt.Sprintf("redis.addrs[%d]", i), a, true)
		}
	}
	if (r.Mode == RedisSentinel) != (r.MasterName != "") {
		if r.Mode == RedisSentinel {
			v.add("redis.master_name", "is required in mode sentinel")
		} else {
			v.add("redis.master_name", "is for mode sentinel only")
		}
	}
	if r.Mode != RedisSentinel {
		if r.SentinelUsername != "" {
			v.add("redis.sentinel_username", "is for mode sentinel only")
		}
		if r.SentinelPassword != "" {
			v.add("redis.sentinel_password", "is for mode sentinel only")
		}
	}
	if r.Mode == RedisCluster && r.DB != 0 {
		v.add("redis.db", "must be 0 in mode cluster (a cluster has one database)")
	}
	v.tls("redis.tls", r.TLS)
}

func (v *validator) etcd(e EtcdConfig) {
	if len(e.Endpoints) == 0 {
		v.add("etcd.endpoints", "at least one endpoint is required")
	}
	for i, ep := range e.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add(fmt.Sprintf("etcd.endpoints[%d]", i), "must be an http:// or https:// URL with a host (got %q)", ep)
		}
	}
	v.tls("etcd.tls", e.TLS)
}

func (v *validator) tls(prefix string, t TLSConfig) {
	pair := true
	if t.CertFile != "" && t.KeyFile == "" {
		v.add(prefix+".key_file", "must be set when %s.cert_file is set", prefix)
		pair = false
	}
	if t.KeyFile != "" && t.CertFile == "" {
		v.add(prefix+".cert_file", "must be set when %s.key_file is set", prefix)
		pair = false
	}
	if !t.Enabled && t != (TLSConfig{}) {
		// Settings without enabled would silently connect in plain text.
		v.add(prefix+".enabled", "must be true when other %s settings are given", prefix)
	}
	if t.Enabled && pair {
		// The files are read now, so that a missing or bad one stops the
		// binary at start-up, exit 2 naming its key, rather than at its
		// first connection.
		if _, _, err := LoadTLS(prefix, t); err != nil {
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				fe := e.(*FieldError)
				v.seen[fe.Key] = true
				v.errs = append(v.errs, fe)
			}
		}
	}
}

// LoadTLS reads the PEM files of t, the TLS section at key prefix
// ("redis.tls", "etcd.tls"): the certificate authorities of CAFile (nil:
// the system's roots) and the client certificate of CertFile and KeyFile
// (none when they are empty). Its error joins a *FieldError per key at
// fault, naming the key and the file, wrapping the cause (os.ErrNotExist
// for a missing file): a file that cannot be read, one that holds no
// PEM certificate (ca_file, cert_file), a key that does not parse or
// does not match cert_file (key_file). Validate calls it for an enabled
// section, so Load (every binary) refuses bad files with exit 2; connect
// builds its tls.Config from the result.
func LoadTLS(prefix string, t TLSConfig) (*x509.CertPool, []tls.Certificate, error) {
	var (
		errs  []error
		pool  *x509.CertPool
		certs []tls.Certificate
	)
	bad := func(key, format string, args ...any) {
		err := fmt.Errorf(format, args...)
		errs = append(errs, &FieldError{Key: prefix + "." + key, Msg: err.Error(), Err: errors.Unwrap(err)})
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		pool = x509.NewCertPool()
		switch {
		case err != nil:
			bad("ca_file", "%w", err)
		case !pool.AppendCertsFromPEM(pem):
			bad("ca_file", "%s holds no PEM certificate", t.CAFile)
		}
	}
	if t.CertFile != "" && t.KeyFile != "" {
		certPEM, cerr := os.ReadFile(t.CertFile)
		keyPEM, kerr := os.ReadFile(t.KeyFile)
		if cerr != nil {
			bad("cert_file", "%w", cerr)
		} else if err := certificates(certPEM); err != nil {
			bad("cert_file", "%s: %w", t.CertFile, err)
			cerr = err
		}
		if kerr != nil {
			bad("key_file", "%w", kerr)
		}
		if cerr == nil && kerr == nil {
			cert, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil { // the certificates parse: the key is at fault
				bad("key_file", "%s (for %s.cert_file %s): %w", t.KeyFile, prefix, t.CertFile, err)
			}
			certs = []tls.Certificate{cert}
		}
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return pool, certs, nil
}

// certificates checks that pem holds at least one certificate and that
// each of its certificate blocks parses.
func certificates(data []byte) error {
	n := 0
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return errors.New("no PEM certificate found")
	}
	return nil
}
