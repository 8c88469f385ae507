package bridge

// Security: TLS per listener, from PEM files reloaded on change; Kafka's ACLs from
// ZooKeeper (acls.go) enforced on the Kafka listener (newproto/authorize.go).

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"

	"github.com/zkbridge/zkbridge/authz"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/tlsconfig"
	"github.com/zkbridge/zkbridge/zkstate"
)

// validateTLS checks the listeners' TLS settings and the authorizer's.
func (c Config) validateTLS() []error {
	var errs []error
	switch c.Authorizer {
	case "", AuthorizerZooKeeper:
	default:
		errs = append(errs, fmt.Errorf("bridge: Authorizer %q: want %q or none", c.Authorizer, AuthorizerZooKeeper))
	}
	if _, err := authz.ParseSuperUsers(c.SuperUsers); err != nil {
		errs = append(errs, fmt.Errorf("bridge: SuperUsers: %w", err))
	}
	if _, err := authz.ParseRules(c.PrincipalMappingRules); err != nil {
		errs = append(errs, fmt.Errorf("bridge: PrincipalMappingRules: %w", err))
	}
	for _, l := range []struct {
		name string
		s    tlsconfig.Server
	}{{"KafkaTLS", c.KafkaTLS}, {"LegacyTLS", c.LegacyTLS}, {"AdminTLS", c.AdminTLS}} {
		if err := l.s.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("bridge: %s: %w", l.name, err))
		}
	}
	return errs
}

// serverTLS loads one listener's TLS configuration; nil: plaintext. A later change of the
// files that does not load is logged and the previous certificate kept.
func (b *Bridge) serverTLS(listener string, s tlsconfig.Server) (*tls.Config, error) {
	if !s.Enabled() {
		return nil, nil
	}
	log := b.log.With().Str("listener", listener).Logger()
	cfg, err := tlsconfig.NewServer(s, tlsconfig.ServerOptions{
		OnError: func(err error) {
			log.Warn().Err(err).Msg("TLS files changed but do not load; keeping the previous certificate")
		},
		OnReload: func() { log.Info().Msg("TLS certificate reloaded") },
	})
	if err != nil {
		return nil, fmt.Errorf("bridge: %s listener: %w", listener, err)
	}
	return cfg, nil
}

// authorizer builds the authorizer and loads the ACLs once, so that the listeners never serve
// with an empty set; nil without Config.Authorizer. Run follows the changes (followACLs).
func (b *Bridge) authorizer(ctx context.Context, store *zkstate.Store) (*authz.Authorizer, error) {
	if b.cfg.Authorizer == "" {
		return nil, nil
	}
	su, _ := authz.ParseSuperUsers(b.cfg.SuperUsers) // Validate checked it
	a := authz.New(authz.Policy{SuperUsers: su, AllowIfNoACL: b.cfg.AllowEveryoneIfNoACL})
	t, err := loadACLs(ctx, store, b.log)
	if err != nil {
		return nil, fmt.Errorf("bridge: authorizer: %w", err)
	}
	a.Set(t)
	b.log.Info().Int("patterns", t.Len()).Msg("authorizer: ACLs loaded from ZooKeeper")
	return a, nil
}

// newprotoAuthorizer is a as newproto.Config wants it: nil stays an untyped nil.
func newprotoAuthorizer(a *authz.Authorizer) newproto.Authorizer {
	if a == nil {
		return nil
	}
	return a
}

// tlsListener wraps ln in cfg; nil cfg: ln as it is.
func tlsListener(ln net.Listener, cfg *tls.Config) net.Listener {
	if cfg == nil {
		return ln
	}
	return tls.NewListener(ln, cfg)
}

// withAdminToken requires "Authorization: Bearer <token>" on every admin path but /healthz
// (liveness probes carry no secret); an empty token requires nothing.
func withAdminToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="zkbridge"`)
			http.Error(w, "a bearer token is required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// upstreamDialer dials the upstream brokers over TLS when configured; nil: the relay's plain
// TCP dialer. Each broker's certificate is checked against the name it is dialed by (its
// advertised host), or Client.ServerName when set.
func upstreamDialer(c *tlsconfig.Client) (func(ctx context.Context, network, addr string) (net.Conn, error), error) {
	if c == nil {
		return nil, nil
	}
	cfg, err := tlsconfig.NewClient(*c)
	if err != nil {
		return nil, fmt.Errorf("bridge: upstream TLS: %w", err)
	}
	d := &tls.Dialer{Config: cfg}
	return d.DialContext, nil
}
