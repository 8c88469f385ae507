package main

import (
	"fmt"
	"os"
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
	flags = append(flags,
		&cli.BoolFlag{Name: "upstream-tls", EnvVars: []string{"ZKBRIDGE_UPSTREAM_TLS"},
			Usage: "dial the upstream brokers over TLS (their SSL listeners: give --upstream the SSL ports; brokers from /brokers/ids are dialed at their SSL endpoint), verifying each against the name it is dialed by"},
		&cli.StringFlag{Name: "upstream-tls-ca", EnvVars: []string{"ZKBRIDGE_UPSTREAM_TLS_CA"},
			Usage: "PEM CA file that vouches for the upstream brokers (default: the system's roots)"},
		&cli.StringFlag{Name: "upstream-tls-cert", EnvVars: []string{"ZKBRIDGE_UPSTREAM_TLS_CERT"},
			Usage: "PEM client certificate for brokers that require mutual TLS"},
		&cli.StringFlag{Name: "upstream-tls-key", EnvVars: []string{"ZKBRIDGE_UPSTREAM_TLS_KEY"},
			Usage: "PEM private key of --upstream-tls-cert"},
		&cli.StringFlag{Name: "upstream-tls-server-name", EnvVars: []string{"ZKBRIDGE_UPSTREAM_TLS_SERVER_NAME"},
			Usage: "the name every broker certificate must carry (default: each broker's own host name)"},
		&cli.StringFlag{Name: "admin-token-file",
			Usage: "file holding the bearer token the admin listener requires on every path but /healthz (Authorization: Bearer <token>); or set ZKBRIDGE_ADMIN_TOKEN. The token is never a flag value"},
		&cli.StringFlag{Name: "ssl-principal-mapping-rules", EnvVars: []string{"ZKBRIDGE_SSL_PRINCIPAL_MAPPING_RULES"},
			Usage: "how a client certificate's subject (RFC 2253, CN=alice,OU=eng,O=corp) becomes the principal User:<name>, as Kafka's ssl.principal.mapping.rules: RULE:pattern/replacement/[LU] and DEFAULT, comma-separated, the first matching rule wins; no rule matching refuses the connection (default DEFAULT: the whole subject)"},
		&cli.StringFlag{Name: "authorizer", EnvVars: []string{"ZKBRIDGE_AUTHORIZER"},
			Usage: "zookeeper: enforce the Kafka ACLs kept in ZooKeeper (/kafka-acl, /kafka-acl-extended, followed through their change notifications) on every request the bridge answers, as a broker with AclAuthorizer does: Group READ (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit), Group DESCRIBE (FindCoordinator, OffsetFetch, DescribeGroups), Group DELETE (DeleteGroups, OffsetDelete), Topic READ for committed and deleted topics, Topic DESCRIBE for fetched ones, ListGroups filtered unless Cluster DESCRIBE (default: none, everything allowed)"},
		&cli.StringFlag{Name: "super-users", EnvVars: []string{"ZKBRIDGE_SUPER_USERS"},
			Usage: "principals allowed everything by the authorizer, as super.users: User:admin;User:ops"},
		&cli.StringFlag{Name: "sasl-mechanisms", EnvVars: []string{"ZKBRIDGE_SASL_MECHANISMS"},
			Usage: "require SASL on the Kafka listener (and the proxy listeners) with these mechanisms, comma-separated: SCRAM-SHA-256 and SCRAM-SHA-512 check the credentials Kafka keeps in ZooKeeper under /config/users/<user> (kafka-configs --alter --add-config 'SCRAM-SHA-512=[password=...]' --entity-type users writes them), PLAIN the --sasl-plain-file; with --kafka-tls-cert the listener is SASL_SSL, else SASL_PLAINTEXT (default: no SASL)"},
		&cli.StringFlag{Name: "sasl-plain-file", EnvVars: []string{"ZKBRIDGE_SASL_PLAIN_FILE"},
			Usage: "PLAIN credentials, one user:password a line (keep it readable by the bridge only)"},
		&cli.DurationFlag{Name: "sasl-session-lifetime", EnvVars: []string{"ZKBRIDGE_SASL_SESSION_LIFETIME"},
			Usage: "KIP-368 session lifetime, as connections.max.reauth.ms: a SASL client must re-authenticate on its connection within it or the connection is closed at its next request (default 0: sessions never expire)"},
		&cli.BoolFlag{Name: "sasl-forward", EnvVars: []string{"ZKBRIDGE_SASL_FORWARD"},
			Usage: "require SASL on the Kafka and proxy listeners and let the upstream brokers check it: each client's own SaslHandshake/SaslAuthenticate (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) is forwarded over its own upstream connection to the brokers' SASL_PLAINTEXT listeners (SASL_SSL with --upstream-tls) registered in /brokers/ids, so a client reaches a broker only as itself; the principal the broker authenticated is the one --authorizer checks on the group APIs, and re-authentication (KIP-368) follows the brokers' connections.max.reauth.ms. The bridge holds no broker credentials (and collects no lag). Not with --sasl-mechanisms or --upstream seeds"},
		&cli.BoolFlag{Name: "allow-everyone-if-no-acl-found", EnvVars: []string{"ZKBRIDGE_ALLOW_EVERYONE_IF_NO_ACL_FOUND"},
			Usage: "allow an operation on a resource no ACL matches, as allow.everyone.if.no.acl.found (default false: denied)"},
	)
	return flags
}

// secret reads a secret from a file (its first line, trimmed) or else from an environment
// variable; secrets never come from the command line, where ps shows them.
func secret(file, env string) (string, error) {
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		s := strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0])
		if s == "" {
			return "", fmt.Errorf("%s is empty", file)
		}
		return s, nil
	}
	return strings.TrimSpace(os.Getenv(env)), nil
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
	cfg.PrincipalMappingRules = c.String("ssl-principal-mapping-rules")
	up := tlsconfig.Client{CAFile: c.String("upstream-tls-ca"), CertFile: c.String("upstream-tls-cert"),
		KeyFile: c.String("upstream-tls-key"), ServerName: c.String("upstream-tls-server-name")}
	if c.Bool("upstream-tls") {
		cfg.UpstreamTLS = &up
	} else if up != (tlsconfig.Client{}) {
		return usagef("--upstream-tls-ca/-cert/-key/-server-name need --upstream-tls")
	}
	zt, err := zkTLS(c) // app.go: every command's --zk-tls flags
	if err != nil {
		return err
	}
	cfg.ZKTLS = zt
	token, err := secret(c.String("admin-token-file"), "ZKBRIDGE_ADMIN_TOKEN")
	if err != nil {
		return usagef("--admin-token-file: %v", err)
	}
	cfg.AdminToken = token
	cfg.Authorizer = c.String("authorizer")
	cfg.SuperUsers = c.String("super-users")
	cfg.AllowEveryoneIfNoACL = c.Bool("allow-everyone-if-no-acl-found")
	if m := c.String("sasl-mechanisms"); m != "" {
		for _, name := range strings.Split(m, ",") {
			cfg.SASLMechanisms = append(cfg.SASLMechanisms, strings.ToUpper(strings.TrimSpace(name)))
		}
	}
	cfg.SASLPlainFile = c.String("sasl-plain-file")
	cfg.SASLSessionLifetime = c.Duration("sasl-session-lifetime")
	cfg.SASLForward = c.Bool("sasl-forward")
	if cfg.Authorizer != "" && cfg.Authorizer != bridge.AuthorizerZooKeeper {
		return usagef("--authorizer %q: want zookeeper", cfg.Authorizer)
	}
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
