package config

import (
	"fmt"
	"net/url"
	"time"
)

// RedisConfig configures the connection to a standalone Redis server.
type RedisConfig struct {
	// Addr is the server's host:port. Default "127.0.0.1:6379".
	Addr string `koanf:"addr"`
	// Username is the ACL user; empty means the default user.
	Username string `koanf:"username"`
	// Password is the ACL user's password or the AUTH password. Secret.
	Password string `koanf:"password"`
	// DB is the logical database, 0 to 15. Default 0.
	DB int `koanf:"db"`
	// TLS configures TLS to the server.
	TLS TLSConfig `koanf:"tls"`
	// PoolSize is the maximum number of connections; 0 means the
	// go-redis default (10 per CPU). Default 0.
	PoolSize int `koanf:"pool_size"`
	// DialTimeout bounds establishing a connection. Default 5s.
	DialTimeout time.Duration `koanf:"dial_timeout"`
}

// EtcdConfig configures the connection to an etcd cluster.
type EtcdConfig struct {
	// Endpoints are the client URLs of the cluster members, each with
	// scheme http or https. Default ["http://127.0.0.1:2379"].
	Endpoints []string `koanf:"endpoints"`
	// Username is the etcd user; empty disables authentication.
	Username string `koanf:"username"`
	// Password is the etcd user's password. Secret.
	Password string `koanf:"password"`
	// TLS configures TLS to the cluster.
	TLS TLSConfig `koanf:"tls"`
	// DialTimeout bounds fetching an auth token and similar start-up
	// calls. Default 5s.
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

func defaultRedis() RedisConfig {
	return RedisConfig{Addr: "127.0.0.1:6379", DialTimeout: 5 * time.Second}
}

func defaultEtcd() EtcdConfig {
	return EtcdConfig{Endpoints: []string{"http://127.0.0.1:2379"}, DialTimeout: 5 * time.Second}
}

func (v *validator) redis(r RedisConfig) {
	v.hostPort("redis.addr", r.Addr, true)
	v.intRange("redis.db", int64(r.DB), 0, maxRedisDB)
	if r.PoolSize < 0 {
		v.add("redis.pool_size", "must be 0 (the go-redis default) or more (got %d)", r.PoolSize)
	}
	v.positive("redis.dial_timeout", r.DialTimeout)
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
	v.positive("etcd.dial_timeout", e.DialTimeout)
	v.tls("etcd.tls", e.TLS)
}

func (v *validator) tls(prefix string, t TLSConfig) {
	if t.CertFile != "" && t.KeyFile == "" {
		v.add(prefix+".key_file", "must be set when %s.cert_file is set", prefix)
	}
	if t.KeyFile != "" && t.CertFile == "" {
		v.add(prefix+".cert_file", "must be set when %s.key_file is set", prefix)
	}
	if !t.Enabled && t != (TLSConfig{}) {
		// Settings without enabled would silently connect in plain text.
		v.add(prefix+".enabled", "must be true when other %s settings are given", prefix)
	}
}
