package main

import (
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/tlsconfig"
)

// securityFlags are serve's TLS, SASL and authorization flags. Secrets are never flag values:
// flags name files, or environment variables hold them.
func securityFlags() []cli.Flag {
	var flags []cli.Flag
	for _, l := range []struct{ name, what string }{
		{"kafka", "the Kafka listener and every proxy listener"},
		{"legacy", "the legacy listener"},
		{"admin", "the admin listener"},
	} {
		env := "ZKBRIDGE_" + strings.ToUpper(l.name) + "_TLS_"
		flags = append(flags,
			&cli.StringFlag{Name: l.name + "-tls-cert", EnvVars: []string{env + "CERT"},
				Usage: "PEM certificate (chain) file: serve " + l.what + " over TLS (1.2 or newer; default plaintext). The certificate, key and client CA files are read again when they change, without a restart"},
			&cli.StringFlag{Name: l.name + "-tls-key", EnvVars: []string{env + "KEY"},
				Usage: "PEM private key file of --" + l.name + "-tls-cert"},
			&cli.StringFlag{Name: l.name + "-tls-client-ca", EnvVars: []string{env + "CLIENT_CA"},
				Usage: "PEM CA file: clients of " + l.what + " must present a certificate signed by it (mutual TLS)"},
		)
	}
	return flags
}

func tlsServerFlags(c *cli.Context, name string) tlsconfig.Server {
	return tlsconfig.Server{
		CertFile:     c.String(name + "-tls-cert"),
		KeyFile:      c.String(name + "-tls-key"),
		ClientCAFile: c.String(name + "-tls-client-ca"),
	}
}

// securityConfig fills cfg's security settings from the flags.
func securityConfig(c *cli.Context, cfg *bridge.Config) error {
	cfg.KafkaTLS = tlsServerFlags(c, "kafka")
	cfg.LegacyTLS = tlsServerFlags(c, "legacy")
	cfg.AdminTLS = tlsServerFlags(c, "admin")
	for _, l := range []struct {
		name string
		s    tlsconfig.Server
	}{{"kafka", cfg.KafkaTLS}, {"legacy", cfg.LegacyTLS}, {"admin", cfg.AdminTLS}} {
		if err := l.s.Validate(); err != nil {
			return usagef("--%s-tls-cert/--%s-tls-key/--%s-tls-client-ca: %v", l.name, l.name, l.name, err)
		}
	}
	return nil
}
