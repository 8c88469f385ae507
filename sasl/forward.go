package sasl

// Following an exchange that a broker verifies: with the relay forwarding a client's own SASL
// exchange to its broker, the bridge checks nothing itself, but it must know who the broker
// authenticated (the principal of the group APIs it answers) and when the exchange is over. The
// principal is read from the client's messages exactly as the broker reads it; anything the
// broker could read as another principal is refused before it is forwarded.

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrNotForwardable is a mechanism whose principal the bridge cannot read from the exchange
// (GSSAPI, OAUTHBEARER: the broker maps a Kerberos name or a token's claim).
var ErrNotForwardable = errors.New("sasl: mechanism cannot be forwarded")

// Forwardable lists the mechanisms Follow accepts, in the order offered.
var Forwardable = []string{ScramSHA512, ScramSHA256, PlainName}

// Follower follows one forwarded exchange: Client sees each client message before it is
// forwarded, Server each successful broker answer.
type Follower struct {
	mech string
	step int
	user string
	done bool
}

// Follow begins following an exchange of mechanism.
func Follow(mechanism string) (*Follower, error) {
	for _, m := range Forwardable {
		if m == mechanism {
			return &Follower{mech: mechanism}, nil
		}
	}
	return nil, fmt.Errorf("%w: %q (forwardable: %s)", ErrNotForwardable, mechanism, strings.Join(Forwardable, ", "))
}

// Mechanism is the mechanism followed.
func (f *Follower) Mechanism() string { return f.mech }

// User is the user the client claims (known after its first message); the authenticated one
// once Server reported done.
func (f *Follower) User() string { return f.user }

// Client checks the client's next message; an error means it must not be forwarded and the
// authentication fails.
func (f *Follower) Client(msg []byte) error {
	if f.done || f.step%2 == 1 {
		return fmt.Errorf("sasl: %s: client message out of turn: %w", f.mech, ErrAuthenticationFailed)
	}
	if f.step == 0 {
		var (
			user string
			err  error
		)
		if f.mech == PlainName {
			user, err = plainUser(msg)
		} else {
			user, err = scramClientFirstUser(msg)
		}
		if err != nil {
			return fmt.Errorf("sasl: %s: %w: %w", f.mech, err, ErrAuthenticationFailed)
		}
		f.user = user
	}
	f.step++
	return nil
}

// Server takes the broker's successful answer to the last client message; done: the broker
// authenticated User(). An error: the answer is not what a successful step looks like.
func (f *Follower) Server(msg []byte) (done bool, err error) {
	if f.done || f.step%2 == 0 {
		return false, fmt.Errorf("sasl: %s: broker message out of turn: %w", f.mech, ErrAuthenticationFailed)
	}
	f.step++
	switch {
	case f.mech == PlainName:
		f.done = true // RFC 4616: one message, the answer is success or failure
	case f.step == 2: // server-first-message
		if !strings.HasPrefix(string(msg), "r=") {
			return false, fmt.Errorf("sasl: %s: broker's first message %q is not r=...: %w", f.mech, msg, ErrAuthenticationFailed)
		}
	default: // server-final-message: v=<signature>, or e=<error>
		if !strings.HasPrefix(string(msg), "v=") {
			return false, fmt.Errorf("sasl: %s: broker's final message %q is not v=...: %w", f.mech, msg, ErrAuthenticationFailed)
		}
		f.done = true
	}
	return f.done, nil
}

// plainUser reads "authzid NUL authcid NUL password" as Kafka's PlainSaslServer does: the
// principal is authcid, and an authorization id must be empty or authcid.
func plainUser(msg []byte) (string, error) {
	if !utf8.Valid(msg) {
		return "", errors.New("message is not UTF-8")
	}
	parts := strings.Split(string(msg), "\x00")
	if len(parts) != 3 || parts[1] == "" {
		return "", errors.New("malformed message")
	}
	if parts[0] != "" && parts[0] != parts[1] {
		return "", fmt.Errorf("authorization id %q is not the user", parts[0])
	}
	return parts[1], nil
}

// scramClientFirstUser reads the user of a client-first-message as Kafka's ScramSaslServer
// does. Refused: channel binding (Kafka has none), an authorization id that is not the user,
// and tokenauth=true (a delegation token: the principal is the token's owner, which only the
// broker knows).
func scramClientFirstUser(msg []byte) (string, error) {
	if !utf8.Valid(msg) {
		return "", errors.New("client-first is not UTF-8")
	}
	parts := strings.SplitN(string(msg), ",", 3)
	if len(parts) != 3 || (parts[0] != "n" && parts[0] != "y") {
		return "", errors.New("client-first: bad gs2 header")
	}
	attrs := strings.Split(parts[2], ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "n=") || !strings.HasPrefix(attrs[1], "r=") || len(attrs[1]) < 3 {
		return "", errors.New("client-first: want n=<user>,r=<nonce>")
	}
	user, err := saslName(attrs[0][2:])
	if err != nil || user == "" {
		return "", errors.New("client-first: bad user name")
	}
	if parts[1] != "" {
		authzid, err := saslName(strings.TrimPrefix(parts[1], "a="))
		if !strings.HasPrefix(parts[1], "a=") || err != nil || authzid != user {
			return "", fmt.Errorf("client-first: authorization id %q is not the user", parts[1])
		}
	}
	for _, ext := range attrs[2:] {
		if k, v, _ := strings.Cut(ext, "="); k == "tokenauth" && strings.EqualFold(v, "true") {
			return "", errors.New("client-first: delegation tokens (tokenauth) cannot be forwarded: the principal is the token's owner")
		}
	}
	return user, nil
}
