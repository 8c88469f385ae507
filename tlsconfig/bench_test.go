package tlsconfig_test

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"net"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/tlsconfig"
	"github.com/zkbridge/zkbridge/tlsconfig/tlstest"
)

// Full handshakes (no resumption) over an in-memory pipe, client and server in this process:
// run with -cpu 1 for handshakes per second per core, both ends' work counted (ECDSA P-256
// certificates, X25519). The server's share is reported apart as server-µs.
func BenchmarkHandshake(b *testing.B) {
	ca := tlstest.NewCA(b, "ca")
	srv := ca.Server(b, "server")
	alice := ca.Client(b, "alice", pkix.Name{CommonName: "alice"})
	for _, bc := range []struct {
		name    string
		version uint16
		mutual  bool
	}{{"TLS1.3", tls.VersionTLS13, false}, {"TLS1.2", tls.VersionTLS12, false}, {"TLS1.3-mutual", tls.VersionTLS13, true}} {
		b.Run(bc.name, func(b *testing.B) {
			files := tlsconfig.Server{CertFile: srv.CertFile, KeyFile: srv.KeyFile}
			client := ca.ClientConfig(nil)
			if bc.mutual {
				files.ClientCAFile = ca.File
				client = ca.ClientConfig(alice)
			}
			client.MinVersion, client.MaxVersion = bc.version, bc.version
			client.ServerName = "localhost"
			client.ClientSessionCache = nil
			scfg, err := tlsconfig.NewServer(files, tlsconfig.ServerOptions{})
			if err != nil {
				b.Fatal(err)
			}
			var server time.Duration
			b.ResetTimer()
			for range b.N {
				cn, sn := net.Pipe()
				done := make(chan time.Duration, 1)
				go func() {
					start := time.Now()
					s := tls.Server(sn, scfg)
					if err := s.Handshake(); err != nil {
						b.Error(err)
					}
					done <- time.Since(start)
				}()
				c := tls.Client(cn, client)
				if err := c.Handshake(); err != nil {
					b.Fatal(err)
				}
				server += <-done
				cn.Close()
				sn.Close()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handshakes/s")
			b.ReportMetric(float64(server.Microseconds())/float64(b.N), "server-µs")
		})
	}
}
