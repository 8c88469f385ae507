// Package tlsconfig builds the TLS configurations of zkbridge's listeners (Kafka, proxy, legacy,
// admin) and of its connections to brokers and ZooKeeper from PEM files.
//
// A server's certificate, key and client CA are read again when their files change, without a
// restart: every handshake asks for the current configuration (GetConfigForClient), which looks
// at the files' modification times and sizes at most once per check interval and parses them
// again only when one changed. A change that does not load (a certificate written before its key,
// a half-written file) keeps the previous configuration and is reported to OnError; the next check
// tries again. Kafka brokers reload keystores the same way, on an explicit alter-configs; watching
// the files serves the cert-manager and certbot style of rotation with nothing to call.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultCheckInterval is how often a server looks at its files' modification times.
const DefaultCheckInterval = time.Second

// Server names the PEM files of one TLS listener.
type Server struct {
	// CertFile and KeyFile are the server's certificate chain and private key. Both empty: no
	// TLS (plaintext), which stays possible per listener for clients that cannot do TLS.
	CertFile, KeyFile string
	// ClientCAFile, when set, makes the listener require a client certificate signed by one of
	// its CAs (mutual TLS); the certificate's subject is then the client's identity.
	ClientCAFile string
}

// Enabled reports whether the listener speaks TLS.
func (s Server) Enabled() bool { return s.CertFile != "" || s.KeyFile != "" || s.ClientCAFile != "" }

// Validate reports a half-configured listener.
func (s Server) Validate() error {
	if !s.Enabled() {
		return nil
	}
	if s.CertFile == "" || s.KeyFile == "" {
		return errors.New("tls: a certificate file and a key file are both required")
	}
	return nil
}

// ServerOptions tunes a server configuration; the zero value means the defaults.
type ServerOptions struct {
	// CheckInterval bounds how often the files' modification times are looked at
	// (DefaultCheckInterval; negative: at every handshake).
	CheckInterval time.Duration
	// OnError hears of a change of the files that did not load; the previous certificate stays.
	OnError func(error)
	// OnReload hears of a change that loaded.
	OnReload func()
}

// NewServer loads the files once (an error now is a configuration error) and returns a
// configuration that reloads them on change. Minimum version TLS 1.2, as Kafka's default
// ssl.enabled.protocols; with ClientCAFile, a verified client certificate is required.
func NewServer(s Server, opts ServerOptions) (*tls.Config, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if !s.Enabled() {
		return nil, errors.New("tls: no certificate configured")
	}
	if opts.CheckInterval == 0 {
		opts.CheckInterval = DefaultCheckInterval
	}
	r := &reloader{files: s, opts: opts}
	stamp, err := r.stamp()
	if err != nil {
		return nil, err
	}
	cfg, err := r.load()
	if err != nil {
		return nil, err
	}
	r.cur.Store(cfg)
	r.stamped = stamp
	r.checked = time.Now()
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return r.current(), nil },
		// Used only if GetConfigForClient were bypassed; kept for tools that inspect it.
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return &r.current().Certificates[0], nil
		},
	}, nil
}

// reloader holds the current configuration and reloads it when a file changes.
type reloader struct {
	files Server
	opts  ServerOptions
	cur   atomic.Pointer[tls.Config]

	mu      sync.Mutex // serializes checks; handshakes in between use cur
	checked time.Time
	stamped []fileStamp
}

// fileStamp is what says a file changed: its modification time and size.
type fileStamp struct {
	mod  time.Time
	size int64
}

func (r *reloader) paths() []string {
	p := []string{r.files.CertFile, r.files.KeyFile}
	if r.files.ClientCAFile != "" {
		p = append(p, r.files.ClientCAFile)
	}
	return p
}

func (r *reloader) stamp() ([]fileStamp, error) {
	var st []fileStamp
	for _, p := range r.paths() {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		st = append(st, fileStamp{mod: fi.ModTime(), size: fi.Size()})
	}
	return st, nil
}

// current returns the configuration for a handshake, reloading first if the check interval
// has passed and a file changed. Only one handshake at a time checks; the others go on with
// the configuration they find.
func (r *reloader) current() *tls.Config {
	if !r.mu.TryLock() {
		return r.cur.Load()
	}
	defer r.mu.Unlock()
	now := time.Now()
	if r.opts.CheckInterval > 0 && now.Sub(r.checked) < r.opts.CheckInterval {
		return r.cur.Load()
	}
	r.checked = now
	stamp, err := r.stamp()
	if err != nil {
		r.failed(err)
		return r.cur.Load()
	}
	if equalStamps(stamp, r.stamped) {
		return r.cur.Load()
	}
	cfg, err := r.load()
	if err != nil {
		// Keep the old files' configuration; stamped stays old, so the next check retries
		// (the key may arrive after the certificate).
		r.failed(err)
		return r.cur.Load()
	}
	r.stamped = stamp
	r.cur.Store(cfg)
	if r.opts.OnReload != nil {
		r.opts.OnReload()
	}
	return cfg
}

func (r *reloader) failed(err error) {
	if r.opts.OnError != nil {
		r.opts.OnError(err)
	}
}

func equalStamps(a, b []fileStamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].mod.Equal(b[i].mod) || a[i].size != b[i].size {
			return false
		}
	}
	return true
}

// load reads the files into the configuration one handshake uses.
func (r *reloader) load() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(r.files.CertFile, r.files.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: loading %s and %s: %w", r.files.CertFile, r.files.KeyFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if r.files.ClientCAFile != "" {
		pool, err := loadPool(r.files.ClientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: %s holds no PEM certificate", file)
	}
	return pool, nil
}

// Client names the PEM files of a connection the bridge opens (to a broker, to ZooKeeper).
type Client struct {
	// CAFile verifies the server; empty: the system's roots.
	CAFile string
	// CertFile and KeyFile, when set, are the client certificate (mutual TLS).
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry; empty: the host dialed.
	ServerName string
}

// NewClient loads the files. Certificates are read once: a connection the bridge opens lives
// long, and a new one is dialed with a restart at the latest.
func NewClient(c Client) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pool, err := loadPool(c.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("tls: a client certificate needs both a certificate file and a key file")
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: loading %s and %s: %w", c.CertFile, c.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
