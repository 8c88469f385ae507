package authz_test

import (
	"testing"

	"github.com/zkbridge/zkbridge/authz"
)

// Kafka's SslPrincipalMapperTest cases, in spirit: the first matching rule applies, DEFAULT
// keeps the name, L and U change case, no match is an error.
func TestRules(t *testing.T) {
	for _, tc := range []struct {
		rules, dn, want string
		fail            bool
	}{
		{rules: "", dn: "CN=alice,OU=eng,O=corp", want: "CN=alice,OU=eng,O=corp"},
		{rules: "DEFAULT", dn: "CN=alice", want: "CN=alice"},
		{rules: "RULE:^CN=(.*?),OU=(.*?)$/$1/,DEFAULT", dn: "CN=alice,OU=eng", want: "alice"},
		{rules: "RULE:^CN=(.*?),OU=(.*?)$/$1@$2/L", dn: "CN=Alice,OU=ENG", want: "alice@eng"},
		{rules: "RULE:^CN=(.*?),OU=(.*?)$/$1/U", dn: "CN=alice,OU=eng", want: "ALICE"},
		{rules: "RULE:^CN=([^,]*).*$/$1/, DEFAULT", dn: "CN=bob,O=corp", want: "bob"},
		{rules: "RULE:^CN=(.*)$/svc\\/$1/", dn: "CN=app", want: "svc/app"},
		{rules: "RULE:^CN=(.*),O=other$/$1/,\nDEFAULT", dn: "CN=carol,O=corp", want: "CN=carol,O=corp"},
		{rules: "RULE:^CN=(.*),O=other$/$1/", dn: "CN=carol,O=corp", fail: true},
	} {
		r, err := authz.ParseRules(tc.rules)
		if err != nil {
			t.Fatalf("ParseRules(%q): %v", tc.rules, err)
		}
		got, err := r.Map(tc.dn)
		if tc.fail {
			if err == nil {
				t.Errorf("rules %q map %q to %q, want an error", tc.rules, tc.dn, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("rules %q map %q to %q, %v; want %q", tc.rules, tc.dn, got, err, tc.want)
		}
	}
	for _, bad := range []string{"RULE:abc", "RULE:(/x/", "NOPE", "DEFAULT x"} {
		if _, err := authz.ParseRules(bad); err == nil {
			t.Errorf("ParseRules(%q) succeeded", bad)
		}
	}
}
