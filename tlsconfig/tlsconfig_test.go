package tlsconfig_test

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/tlsconfig"
	"github.com/zkbridge/zkbridge/tlsconfig/tlstest"
)

// serve accepts TLS connections on loopback and completes their handshakes.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				tc := tls.Server(nc, cfg)
				_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
				if tc.Handshake() == nil {
					_, _ = tc.Write([]byte{1})
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// dial completes a handshake and one read (TLS 1.3 reports a refused client certificate only
// after the handshake, on the first read); it returns the server certificate's serial.
func dial(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func TestServerValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    tlsconfig.Server
		ok   bool
	}{
		{"plaintext", tlsconfig.Server{}, true},
		{"cert and key", tlsconfig.Server{CertFile: "c", KeyFile: "k"}, true},
		{"cert only", tlsconfig.Server{CertFile: "c"}, false},
		{"key only", tlsconfig.Server{KeyFile: "k"}, false},
		{"client CA only", tlsconfig.Server{ClientCAFile: "ca"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.s.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestNewServerMissingFiles(t *testing.T) {
	if _, err := tlsconfig.NewServer(tlsconfig.Server{CertFile: "/nonexistent.pem", KeyFile: "/nonexistent-key.pem"}, tlsconfig.ServerOptions{}); err == nil {
		t.Fatal("NewServer with missing files succeeded")
	}
}

// A client that offers at most TLS 1.1 is refused: minimum version 1.2 (Kafka's default
// ssl.enabled.protocols are TLSv1.2 and TLSv1.3).
func TestServerMinVersion(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	srv := ca.Server(t, "server")
	cfg, err := tlsconfig.NewServer(tlsconfig.Server{CertFile: srv.CertFile, KeyFile: srv.KeyFile}, tlsconfig.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	old := ca.ClientConfig(nil)
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if _, err := dial(addr, old); err == nil {
		t.Fatal("a TLS 1.1 client got through")
	}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		c := ca.ClientConfig(nil)
		c.MinVersion, c.MaxVersion = v, v
		if _, err := dial(addr, c); err != nil {
			t.Fatalf("TLS %x: %v", v, err)
		}
	}
}

func TestServerMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	other := tlstest.NewCA(t, "other")
	srv := ca.Server(t, "server")
	cfg, err := tlsconfig.NewServer(tlsconfig.Server{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: ca.File}, tlsconfig.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	for _, tc := range []struct {
		name string
		pair *tlstest.Pair
		ok   bool
	}{
		{"no client certificate", nil, false},
		{"certificate of another CA", other.Client(t, "stranger", pkix.Name{CommonName: "stranger"}), false},
		{"certificate of the client CA", ca.Client(t, "alice", pkix.Name{CommonName: "alice"}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dial(addr, ca.ClientConfig(tc.pair))
			if (err == nil) != tc.ok {
				t.Fatalf("dial: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// Certificates are reloaded without a restart: new files are served after the check interval;
// a change that does not load keeps the previous certificate and is reported.
func TestServerReload(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	first := ca.Server(t, "first")
	second := ca.Server(t, "second")
	dir := t.TempDir()
	certFile, keyFile := dir+"/cert.pem", dir+"/key.pem"
	write := func(p *tlstest.Pair, cert, key []byte, at time.Time) {
		t.Helper()
		for f, b := range map[string][]byte{certFile: cert, keyFile: key} {
			if err := os.WriteFile(f, b, 0o600); err != nil {
				t.Fatal(err)
			}
			// An explicit, distinct mtime: filesystems with coarse timestamps would
			// otherwise hide a quick rewrite.
			if err := os.Chtimes(f, at, at); err != nil {
				t.Fatal(err)
			}
		}
	}
	base := time.Now().Add(-time.Hour)
	write(first, first.CertPEM, first.KeyPEM, base)

	var errs, reloads atomic.Int32
	cfg, err := tlsconfig.NewServer(tlsconfig.Server{CertFile: certFile, KeyFile: keyFile}, tlsconfig.ServerOptions{
		CheckInterval: -1,
		OnError:       func(error) { errs.Add(1) },
		OnReload:      func() { reloads.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	want := func(p *tlstest.Pair) {
		t.Helper()
		got, err := dial(addr, ca.ClientConfig(nil))
		if err != nil {
			t.Fatal(err)
		}
		if got != p.Serial.String() {
			t.Fatalf("served certificate serial %s, want %s", got, p.Serial)
		}
	}
	want(first)

	// The new certificate with the old key: does not load, the old pair stays.
	write(second, second.CertPEM, first.KeyPEM, base.Add(time.Minute))
	want(first)
	if errs.Load() == 0 {
		t.Fatal("a mismatched certificate and key were not reported")
	}

	write(second, second.CertPEM, second.KeyPEM, base.Add(2*time.Minute))
	want(second)
	if reloads.Load() != 1 {
		t.Fatalf("%d reloads, want 1", reloads.Load())
	}
	want(second) // unchanged files are not reloaded again
	if reloads.Load() != 1 {
		t.Fatalf("%d reloads after an unchanged check, want 1", reloads.Load())
	}
}

// Within the check interval the files are not looked at.
func TestServerCheckInterval(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	first, second := ca.Server(t, "first"), ca.Server(t, "second")
	dir := t.TempDir()
	certFile, keyFile := dir+"/cert.pem", dir+"/key.pem"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(certFile, first.CertPEM, 0o600))
	must(os.WriteFile(keyFile, first.KeyPEM, 0o600))
	cfg, err := tlsconfig.NewServer(tlsconfig.Server{CertFile: certFile, KeyFile: keyFile}, tlsconfig.ServerOptions{CheckInterval: time.Hour})
	must(err)
	addr := serve(t, cfg)
	must(os.WriteFile(certFile, second.CertPEM, 0o600))
	must(os.WriteFile(keyFile, second.KeyPEM, 0o600))
	got, err := dial(addr, ca.ClientConfig(nil))
	must(err)
	if got != first.Serial.String() {
		t.Fatalf("reloaded within the check interval: serial %s", got)
	}
}

func TestNewClient(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	srv := ca.Server(t, "server")
	alice := ca.Client(t, "alice", pkix.Name{CommonName: "alice"})
	scfg, err := tlsconfig.NewServer(tlsconfig.Server{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: ca.File}, tlsconfig.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, scfg)
	ccfg, err := tlsconfig.NewClient(tlsconfig.Client{CAFile: ca.File, CertFile: alice.CertFile, KeyFile: alice.KeyFile, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dial(addr, ccfg); err != nil {
		t.Fatal(err)
	}
	wrong, err := tlsconfig.NewClient(tlsconfig.Client{CAFile: ca.File, CertFile: alice.CertFile, KeyFile: alice.KeyFile, ServerName: "kafka.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	var verr *tls.CertificateVerificationError
	if _, err := dial(addr, wrong); !errors.As(err, &verr) {
		t.Fatalf("wrong server name: %v, want a verification error", err)
	}
	if _, err := tlsconfig.NewClient(tlsconfig.Client{CertFile: alice.CertFile}); err == nil {
		t.Fatal("a client certificate without its key was accepted")
	}
}
