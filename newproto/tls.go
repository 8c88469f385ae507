package newproto

// TLS on the Kafka listeners (Config.TLS): every listener the Server serves, the bootstrap one
// and the proxy listeners, is wrapped in it, as a Kafka broker's SSL listener. The handshake is
// completed before the first request is read, so that the connection's identity (the client
// certificate of mutual TLS) is known to every request (ConnInfo.TLS).

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/zkbridge/zkbridge/authz"
)

// DefaultHandshakeTimeout bounds a client's TLS handshake.
const DefaultHandshakeTimeout = 10 * time.Second

// tlsListener wraps ln when the server speaks TLS.
func (s *Server) tlsListener(ln net.Listener) net.Listener {
	if s.cfg.TLS == nil {
		return ln
	}
	return tls.NewListener(ln, s.cfg.TLS)
}

// handshake completes a TLS connection's handshake and records its state; false: the
// connection is to be closed.
func (c *conn) handshake(ctx context.Context) bool {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultHandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		c.s.metrics.framesRejected.WithLabelValues("tls_handshake").Inc()
		c.log.Debug().Err(err).Msg("TLS handshake failed")
		return false
	}
	st := tc.ConnectionState()
	c.info.TLS = &st
	if len(st.PeerCertificates) > 0 {
		p, err := authz.CertificatePrincipal(st.PeerCertificates[0], c.s.cfg.PrincipalRules)
		if err != nil {
			// Kafka fails the connection's authentication when no rule applies.
			c.s.metrics.framesRejected.WithLabelValues("tls_principal").Inc()
			c.log.Warn().Err(err).Msg("no principal for the client certificate; closing connection")
			return false
		}
		c.info.Principal = p
	}
	return true
}
