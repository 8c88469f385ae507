// Package sasl is the server side of the SASL mechanisms the bridge's Kafka listener offers:
// SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) against credentials in the format Kafka
// keeps in ZooKeeper (ScramCredentialUtils), and PLAIN (RFC 4616) against a credentials file.
//
// Each mechanism starts one Exchange per authentication; Step takes the client's next message
// and returns the server's answer, and, once done, the authenticated user name. The exchanges
// are pure apart from the credential lookup, which the caller supplies.
package sasl

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

// Mechanism names, as in SaslHandshake.
const (
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
	PlainName   = "PLAIN"
)

// ErrAuthenticationFailed is a wrong password, an unknown user or a malformed message: the
// client is told no more than that (Kafka's SaslAuthenticationException).
var ErrAuthenticationFailed = errors.New("authentication failed")

// Credential is a SCRAM credential as Kafka stores it: salt, StoredKey = H(ClientKey), ServerKey,
// iterations (RFC 5802 section 3).
type Credential struct {
	Salt, StoredKey, ServerKey []byte
	Iterations                 int
}

// ParseCredential reads Kafka's ScramCredentialUtils.credentialToString form:
// "salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>".
func ParseCredential(s string) (Credential, error) {
	var c Credential
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return Credential{}, fmt.Errorf("sasl: SCRAM credential: %q is not key=value", kv)
		}
		var err error
		switch k {
		case "salt":
			c.Salt, err = base64.StdEncoding.DecodeString(v)
		case "stored_key":
			c.StoredKey, err = base64.StdEncoding.DecodeString(v)
		case "server_key":
			c.ServerKey, err = base64.StdEncoding.DecodeString(v)
		case "iterations":
			c.Iterations, err = strconv.Atoi(v)
		default:
			continue
		}
		if err != nil {
			return Credential{}, fmt.Errorf("sasl: SCRAM credential %s: %w", k, err)
		}
		seen[k] = true
	}
	for _, k := range []string{"salt", "stored_key", "server_key", "iterations"} {
		if !seen[k] {
			return Credential{}, fmt.Errorf("sasl: SCRAM credential without %s", k)
		}
	}
	if c.Iterations < 1 || len(c.Salt) == 0 {
		return Credential{}, errors.New("sasl: SCRAM credential with no salt or no iterations")
	}
	return c, nil
}

// String is Kafka's form of the credential.
func (c Credential) String() string {
	b := base64.StdEncoding
	return fmt.Sprintf("salt=%s,stored_key=%s,server_key=%s,iterations=%d",
		b.EncodeToString(c.Salt), b.EncodeToString(c.StoredKey), b.EncodeToString(c.ServerKey), c.Iterations)
}

func hashOf(mechanism string) (func() hash.Hash, error) {
	switch mechanism {
	case ScramSHA256:
		return sha256.New, nil
	case ScramSHA512:
		return sha512.New, nil
	}
	return nil, fmt.Errorf("sasl: %q is not a SCRAM mechanism", mechanism)
}

func hmacOf(h func() hash.Hash, key, msg []byte) []byte {
	m := hmac.New(h, key)
	m.Write(msg)
	return m.Sum(nil)
}

// NewCredential computes the credential of password, as `kafka-configs --alter --add-config
// 'SCRAM-SHA-256=[iterations=4096,password=...]'` does (a random salt when salt is nil).
func NewCredential(mechanism, password string, salt []byte, iterations int) (Credential, error) {
	h, err := hashOf(mechanism)
	if err != nil {
		return Credential{}, err
	}
	if salt == nil {
		salt = make([]byte, 32)
		_, _ = rand.Read(salt)
	}
	salted, err := pbkdf2.Key(h, password, salt, iterations, h().Size())
	if err != nil {
		return Credential{}, fmt.Errorf("sasl: %w", err)
	}
	clientKey := hmacOf(h, salted, []byte("Client Key"))
	sum := h()
	sum.Write(clientKey)
	return Credential{Salt: salt, StoredKey: sum.Sum(nil), ServerKey: hmacOf(h, salted, []byte("Server Key")), Iterations: iterations}, nil
}

// Credentials looks up a user's SCRAM credential for a mechanism; ErrUnknownUser when there
// is none.
type Credentials interface {
	ScramCredential(ctx context.Context, mechanism, user string) (Credential, error)
}

// ErrUnknownUser is a user without a credential for the mechanism.
var ErrUnknownUser = errors.New("sasl: unknown user")

// Scram is a SCRAM mechanism.
type Scram struct {
	mechanism string
	h         func() hash.Hash
	creds     Credentials
	nonce     func() string
}

// NewScram returns the SCRAM mechanism (ScramSHA256 or ScramSHA512) verifying against creds.
func NewScram(mechanism string, creds Credentials) (*Scram, error) {
	h, err := hashOf(mechanism)
	if err != nil {
		return nil, err
	}
	return &Scram{mechanism: mechanism, h: h, creds: creds, nonce: randomNonce}, nil
}

func randomNonce() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Name is the mechanism's name.
func (s *Scram) Name() string { return s.mechanism }

// Start begins one authentication.
func (s *Scram) Start() Exchange { return &scramExchange{s: s} }

// Exchange is one authentication in progress.
type Exchange interface {
	// Step takes the client's next message. done: the client is authenticated as user, and
	// resp is the last message for it. An error ends the exchange: the client failed.
	Step(ctx context.Context, msg []byte) (resp []byte, user string, done bool, err error)
}

type scramExchange struct {
	s       *Scram
	step    int
	user    string
	cred    Credential
	gs2     string // the gs2 header the client sent, e.g. "n,,"
	first   string // client-first-message-bare
	sfirst  string // server-first-message
	nonce   string // client nonce + server nonce
	authzid string
}

func (e *scramExchange) Step(ctx context.Context, msg []byte) ([]byte, string, bool, error) {
	switch e.step {
	case 0:
		e.step = 1
		return e.clientFirst(ctx, string(msg))
	case 1:
		e.step = 2
		return e.clientFinal(string(msg))
	}
	return nil, "", false, fmt.Errorf("sasl: SCRAM message after the exchange ended: %w", ErrAuthenticationFailed)
}

// saslName decodes a SCRAM user name ("=2C" is ",", "=3D" is "=").
func saslName(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", fmt.Errorf("sasl: bad escape in user name %q", s)
		}
		i += 2
	}
	return b.String(), nil
}

func (e *scramExchange) clientFirst(ctx context.Context, msg string) ([]byte, string, bool, error) {
	fail := func(format string, args ...any) ([]byte, string, bool, error) {
		return nil, "", false, fmt.Errorf("sasl: %s client-first: %s: %w", e.s.mechanism, fmt.Sprintf(format, args...), ErrAuthenticationFailed)
	}
	// gs2-header: cbind-flag "," [authzid] ","; no channel binding over Kafka ("p=" refused).
	parts := strings.SplitN(msg, ",", 3)
	if len(parts) != 3 || (parts[0] != "n" && parts[0] != "y") {
		return fail("bad gs2 header")
	}
	if parts[1] != "" {
		if !strings.HasPrefix(parts[1], "a=") {
			return fail("bad authzid")
		}
		e.authzid, _ = saslName(parts[1][2:])
	}
	e.gs2 = parts[0] + "," + parts[1] + ","
	e.first = parts[2]
	attrs := strings.Split(e.first, ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "n=") || !strings.HasPrefix(attrs[1], "r=") || len(attrs[1]) < 3 {
		return fail("want n=<user>,r=<nonce>")
	}
	user, err := saslName(attrs[0][2:])
	if err != nil || user == "" {
		return fail("bad user name")
	}
	if e.authzid != "" && e.authzid != user {
		// Kafka: an authorization id must be the authenticated user.
		return fail("authorization id %q is not the user", e.authzid)
	}
	cred, err := e.s.creds.ScramCredential(ctx, e.s.mechanism, user)
	if errors.Is(err, ErrUnknownUser) {
		return nil, "", false, fmt.Errorf("sasl: %s: user %q has no credential: %w", e.s.mechanism, user, ErrAuthenticationFailed)
	}
	if err != nil {
		return nil, "", false, fmt.Errorf("sasl: %s: credential of %q: %w", e.s.mechanism, user, err)
	}
	e.user, e.cred = user, cred
	e.nonce = attrs[1][2:] + e.s.nonce()
	e.sfirst = "r=" + e.nonce + ",s=" + base64.StdEncoding.EncodeToString(cred.Salt) + ",i=" + strconv.Itoa(cred.Iterations)
	return []byte(e.sfirst), "", false, nil
}

func (e *scramExchange) clientFinal(msg string) ([]byte, string, bool, error) {
	fail := func(why string) ([]byte, string, bool, error) {
		return nil, "", false, fmt.Errorf("sasl: %s: user %q: %s: %w", e.s.mechanism, e.user, why, ErrAuthenticationFailed)
	}
	i := strings.LastIndex(msg, ",p=")
	if i < 0 {
		return fail("client-final without proof")
	}
	withoutProof, proofB64 := msg[:i], msg[i+3:]
	attrs := strings.Split(withoutProof, ",")
	if len(attrs) < 2 || attrs[0] != "c="+base64.StdEncoding.EncodeToString([]byte(e.gs2)) {
		return fail("channel binding does not match the gs2 header")
	}
	// Kafka's ScramSaslServer checks that the nonce ends with the server-first nonce, not that
	// it equals it: librdkafka sends its own nonce, then the whole server nonce (which already
	// starts with its own). The proof covers the message as sent, so nothing is lost.
	if !strings.HasPrefix(attrs[1], "r=") || !strings.HasSuffix(attrs[1], e.nonce) {
		return fail("nonce does not match")
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	if err != nil || len(proof) != e.s.h().Size() {
		return fail("malformed proof")
	}
	authMsg := []byte(e.first + "," + e.sfirst + "," + withoutProof)
	sig := hmacOf(e.s.h, e.cred.StoredKey, authMsg)
	clientKey := make([]byte, len(proof))
	for j := range proof {
		clientKey[j] = proof[j] ^ sig[j]
	}
	sum := e.s.h()
	sum.Write(clientKey)
	if subtle.ConstantTimeCompare(sum.Sum(nil), e.cred.StoredKey) != 1 {
		return fail("invalid credentials")
	}
	serverSig := hmacOf(e.s.h, e.cred.ServerKey, authMsg)
	return []byte("v=" + base64.StdEncoding.EncodeToString(serverSig)), e.user, true, nil
}

// Plain is the PLAIN mechanism against fixed passwords.
type Plain struct {
	passwords map[string]string
}

// ParsePlainFile reads a PLAIN credentials file: one "user:password" a line; blank lines and
// lines starting with # are skipped.
func ParsePlainFile(data []byte) (*Plain, error) {
	p := &Plain{passwords: map[string]string{}}
	for n, line := range bytes.Split(data, []byte("\n")) {
		l := strings.TrimSpace(string(line))
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		user, pw, ok := strings.Cut(l, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("sasl: PLAIN credentials line %d: want user:password", n+1)
		}
		p.passwords[user] = pw
	}
	return p, nil
}

// Name is "PLAIN".
func (p *Plain) Name() string { return PlainName }

// Start begins one authentication.
func (p *Plain) Start() Exchange { return plainExchange{p} }

type plainExchange struct{ p *Plain }

// Step checks "authzid NUL authcid NUL password" (RFC 4616); the authorization id must be
// empty or the user, as Kafka's PlainSaslServer requires.
func (e plainExchange) Step(_ context.Context, msg []byte) ([]byte, string, bool, error) {
	parts := bytes.Split(msg, []byte{0})
	if len(parts) != 3 || len(parts[1]) == 0 {
		return nil, "", false, fmt.Errorf("sasl: PLAIN: malformed message: %w", ErrAuthenticationFailed)
	}
	authz, user, pw := string(parts[0]), string(parts[1]), parts[2]
	if authz != "" && authz != user {
		return nil, "", false, fmt.Errorf("sasl: PLAIN: authorization id %q is not the user: %w", authz, ErrAuthenticationFailed)
	}
	want, ok := e.p.passwords[user]
	if !ok || subtle.ConstantTimeCompare([]byte(want), pw) != 1 {
		return nil, "", false, fmt.Errorf("sasl: PLAIN: user %q: invalid credentials: %w", user, ErrAuthenticationFailed)
	}
	return nil, user, true, nil
}
