package bridge

// SASL on the Kafka listener: SCRAM credentials from ZooKeeper, where a ZooKeeper-mode Kafka
// cluster keeps them (`kafka-configs --zookeeper ... --alter --add-config
// 'SCRAM-SHA-512=[password=...]' --entity-type users --entity-name alice` writes
// /config/users/alice = {"version":1,"config":{"SCRAM-SHA-512":"salt=...,stored_key=...,
// server_key=...,iterations=4096"}}), read at each authentication so that a changed password
// counts at once; PLAIN against a credentials file.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/sasl"
	"github.com/zkbridge/zkbridge/zkstate"
)

// zkScramCredentials reads SCRAM credentials from /config/users.
type zkScramCredentials struct{ store *zkstate.Store }

// userPath is the znode of a user's config: Kafka's Sanitizer.sanitize URL-encodes the name
// (java.net.URLEncoder, with "*" as %2A and a space as %20).
func userPath(user string) string {
	s := url.QueryEscape(user)
	s = strings.ReplaceAll(s, "+", "%20")
	s = strings.ReplaceAll(s, "*", "%2A")
	return "/config/users/" + s
}

// ScramCredential implements sasl.Credentials.
func (z zkScramCredentials) ScramCredential(ctx context.Context, mechanism, user string) (sasl.Credential, error) {
	data, _, err := z.store.Get(ctx, userPath(user))
	if errors.Is(err, zkstate.ErrNoNode) {
		return sasl.Credential{}, sasl.ErrUnknownUser
	}
	if err != nil {
		return sasl.Credential{}, fmt.Errorf("reading the credentials of %q: %w", user, err)
	}
	var doc struct {
		Version int               `json:"version"`
		Config  map[string]string `json:"config"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return sasl.Credential{}, fmt.Errorf("%s: %w", userPath(user), err)
	}
	s, ok := doc.Config[mechanism]
	if !ok {
		return sasl.Credential{}, sasl.ErrUnknownUser
	}
	return sasl.ParseCredential(s)
}

// saslConfig builds the Kafka listener's SASL configuration; nil without mechanisms.
func (b *Bridge) saslConfig(store *zkstate.Store) (*newproto.SASLConfig, error) {
	if b.cfg.SASLForward {
		return &newproto.SASLConfig{Forward: true}, nil
	}
	if len(b.cfg.SASLMechanisms) == 0 {
		return nil, nil
	}
	cfg := &newproto.SASLConfig{SessionLifetime: b.cfg.SASLSessionLifetime}
	for _, m := range b.cfg.SASLMechanisms {
		switch m {
		case sasl.ScramSHA256, sasl.ScramSHA512:
			s, err := sasl.NewScram(m, zkScramCredentials{store})
			if err != nil {
				return nil, err
			}
			cfg.Mechanisms = append(cfg.Mechanisms, s)
		case sasl.PlainName:
			data, err := os.ReadFile(b.cfg.SASLPlainFile)
			if err != nil {
				return nil, fmt.Errorf("bridge: PLAIN credentials: %w", err)
			}
			p, err := sasl.ParsePlainFile(data)
			if err != nil {
				return nil, fmt.Errorf("bridge: %s: %w", b.cfg.SASLPlainFile, err)
			}
			cfg.Mechanisms = append(cfg.Mechanisms, p)
		}
	}
	return cfg, nil
}

// validateSASL checks the SASL settings.
func (c Config) validateSASL() []error {
	var errs []error
	for _, m := range c.SASLMechanisms {
		switch m {
		case sasl.ScramSHA256, sasl.ScramSHA512:
		case sasl.PlainName:
			if c.SASLPlainFile == "" {
				errs = append(errs, errors.New("bridge: SASL PLAIN needs SASLPlainFile"))
			}
		default:
			errs = append(errs, fmt.Errorf("bridge: SASL mechanism %q: want SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN", m))
		}
	}
	if c.SASLSessionLifetime < 0 {
		errs = append(errs, errors.New("bridge: SASLSessionLifetime is negative"))
	}
	if c.SASLForward {
		switch {
		case len(c.SASLMechanisms) > 0:
			errs = append(errs, errors.New("bridge: SASLForward and SASLMechanisms are exclusive: the brokers or the bridge check the credentials, not both"))
		case c.SASLSessionLifetime != 0:
			errs = append(errs, errors.New("bridge: SASLForward takes the session lifetime from the brokers (connections.max.reauth.ms): no SASLSessionLifetime with it"))
		case len(c.Upstream) > 0:
			errs = append(errs, errors.New("bridge: SASLForward needs the brokers from /brokers/ids (UpstreamFromZK): the bridge has no credentials to ask seed brokers for Metadata"))
		case !c.UpstreamFromZK && !c.UpstreamAuto:
			errs = append(errs, errors.New("bridge: SASLForward needs the data path (UpstreamFromZK): the brokers authenticate the clients"))
		}
	}
	if c.SASLSessionLifetime > 0 && c.SASLSessionLifetime < time.Second {
		errs = append(errs, errors.New("bridge: SASLSessionLifetime below a second"))
	}
	return errs
}
