package bridge

// Security of the listeners (issue 16): TLS per listener, from PEM files reloaded on change.

import (
	"crypto/tls"
	"fmt"
	"net"

	"github.com/zkbridge/zkbridge/tlsconfig"
)

// validateTLS checks the listeners' TLS settings.
func (c Config) validateTLS() []error {
	var errs []error
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

// tlsListener wraps ln in cfg; nil cfg: ln as it is.
func tlsListener(ln net.Listener, cfg *tls.Config) net.Listener {
	if cfg == nil {
		return ln
	}
	return tls.NewListener(ln, cfg)
}
