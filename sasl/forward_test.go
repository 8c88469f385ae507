package sasl_test

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/zkbridge/zkbridge/sasl"
)

// A forwarded exchange is followed with the principal a broker reads from the client's
// messages (Kafka's PlainSaslServer and ScramSaslServer): franz-go's clients against our own
// server standing for the broker, every message passing through the Follower.
func TestFollowFranzGoClients(t *testing.T) {
	cred, err := sasl.NewCredential(sasl.ScramSHA512, "pw", nil, 4096)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sasl.NewScram(sasl.ScramSHA512, creds{sasl.ScramSHA512 + "/al,i=ce": cred})
	if err != nil {
		t.Fatal(err)
	}
	plainSrv, err := sasl.ParsePlainFile([]byte("bob:pw\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		server sasl.Exchange
		mech   string
		client func() (fsess, []byte)
		user   string
	}{
		{"SCRAM with an escaped name", srv.Start(), sasl.ScramSHA512, func() (fsess, []byte) {
			s, first, err := scram.Auth{User: "al,i=ce", Pass: "pw"}.AsSha512Mechanism().Authenticate(context.Background(), "")
			if err != nil {
				t.Fatal(err)
			}
			return s, first
		}, "al,i=ce"},
		{"PLAIN", plainSrv.Start(), sasl.PlainName, func() (fsess, []byte) {
			s, first, err := plain.Auth{User: "bob", Pass: "pw"}.AsMechanism().Authenticate(context.Background(), "")
			if err != nil {
				t.Fatal(err)
			}
			return s, first
		}, "bob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := sasl.Follow(tc.mech)
			if err != nil {
				t.Fatal(err)
			}
			cs, msg := tc.client()
			for range 3 {
				if err := f.Client(msg); err != nil {
					t.Fatalf("Client(%q): %v", msg, err)
				}
				resp, _, sdone, err := tc.server.Step(context.Background(), msg)
				if err != nil {
					t.Fatal(err)
				}
				done, err := f.Server(resp)
				if err != nil || done != sdone {
					t.Fatalf("Server(%q) = %v, %v; the server says done %v", resp, done, err, sdone)
				}
				if done {
					if f.User() != tc.user {
						t.Fatalf("followed user %q, want %q", f.User(), tc.user)
					}
					return
				}
				_, msg, err = cs.Challenge(resp)
				if err != nil {
					t.Fatal(err)
				}
			}
			t.Fatal("the exchange did not end")
		})
	}
}

type fsess interface {
	Challenge([]byte) (bool, []byte, error)
}

// What a broker could read as another principal, or that the bridge cannot attribute, is
// refused before it is forwarded.
func TestFollowRefuses(t *testing.T) {
	for _, tc := range []struct {
		mech, first string
	}{
		{sasl.PlainName, "mallory\x00alice\x00pw"},            // authzid is not the user
		{sasl.PlainName, "\x00\x00pw"},                        // no user
		{sasl.PlainName, "alice\x00pw"},                       // two fields
		{sasl.PlainName, "\x00al\xffice\x00pw"},               // not UTF-8: Java would read U+FFFD
		{sasl.ScramSHA256, "n,a=mallory,n=alice,r=abc"},       // authzid is not the user
		{sasl.ScramSHA256, "n,,n=alice,r=abc,tokenauth=true"}, // a delegation token's owner
		{sasl.ScramSHA256, "p=tls-unique,,n=alice,r=abc"},     // channel binding
		{sasl.ScramSHA256, "n,,n=al=ice,r=abc"},               // bad escape
		{sasl.ScramSHA256, "n,,r=abc"},                        // no user
	} {
		f, err := sasl.Follow(tc.mech)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Client([]byte(tc.first)); !errors.Is(err, sasl.ErrAuthenticationFailed) {
			t.Errorf("%s %q: Client = %v, want refused", tc.mech, tc.first, err)
		}
	}
	if _, err := sasl.Follow("GSSAPI"); !errors.Is(err, sasl.ErrNotForwardable) {
		t.Errorf("GSSAPI: %v", err)
	}
	// A broker's SCRAM error (e=...) in place of a signature is not success.
	f, _ := sasl.Follow(sasl.ScramSHA256)
	for _, step := range []func() error{
		func() error { return f.Client([]byte("n,,n=alice,r=abc")) },
		func() error { _, err := f.Server([]byte("r=abcdef,s=c2FsdA==,i=4096")); return err },
		func() error { return f.Client([]byte("c=biws,r=abcdef,p=cHJvb2Y=")) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if done, err := f.Server([]byte("e=invalid-proof")); done || err == nil {
		t.Fatalf("e=invalid-proof: done %v, err %v", done, err)
	}
}

func FuzzFollowClientFirst(f *testing.F) {
	f.Add("n,,n=alice,r=abc")
	f.Add("n,a=alice,n=alice,r=abc,ext=1")
	f.Add("\x00alice\x00pw")
	f.Fuzz(func(t *testing.T, msg string) {
		for _, mech := range sasl.Forwardable {
			fl, _ := sasl.Follow(mech)
			if err := fl.Client([]byte(msg)); err == nil && fl.User() == "" {
				t.Fatalf("%s %q accepted without a user", mech, msg)
			}
		}
	})
}
