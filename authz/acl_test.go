package authz_test

import (
	"testing"

	"github.com/zkbridge/zkbridge/authz"
)

func allow(p, host string, op authz.Operation) authz.Entry {
	return authz.Entry{Principal: p, Host: host, Operation: op, Allow: true}
}

func deny(p, host string, op authz.Operation) authz.Entry {
	return authz.Entry{Principal: p, Host: host, Operation: op}
}

func lit(t authz.ResourceType, name string) authz.Pattern {
	return authz.Pattern{Type: t, Name: name}
}

func pre(t authz.ResourceType, name string) authz.Pattern {
	return authz.Pattern{Type: t, Name: name, PatternType: authz.Prefixed}
}

// Each case is one rule of Kafka's AclAuthorizer.authorize (kafka.security.authorizer).
func TestAuthorize(t *testing.T) {
	group := func(n string) authz.Resource { return authz.Resource{Type: authz.Group, Name: n} }
	for _, tc := range []struct {
		name      string
		acls      map[authz.Pattern][]authz.Entry
		pol       authz.Policy
		principal string
		host      string
		op        authz.Operation
		res       authz.Resource
		want      bool
	}{
		{name: "no ACL at all: denied by default",
			principal: "User:alice", op: authz.Read, res: group("g"), want: false},
		{name: "no ACL at all: allow.everyone.if.no.acl.found",
			pol: authz.Policy{AllowIfNoACL: true}, principal: "User:alice", op: authz.Read, res: group("g"), want: true},
		{name: "an ACL for someone else counts as found: denied even with allow.everyone",
			acls: map[authz.Pattern][]authz.Entry{lit(authz.Group, "g"): {allow("User:bob", "*", authz.Read)}},
			pol:  authz.Policy{AllowIfNoACL: true}, principal: "User:alice", op: authz.Read, res: group("g"), want: false},
		{name: "literal allow",
			acls:      map[authz.Pattern][]authz.Entry{lit(authz.Group, "g"): {allow("User:alice", "*", authz.Read)}},
			principal: "User:alice", op: authz.Read, res: group("g"), want: true},
		{name: "literal allow of another group",
			acls:      map[authz.Pattern][]authz.Entry{lit(authz.Group, "other"): {allow("User:alice", "*", authz.Read)}},
			principal: "User:alice", op: authz.Read, res: group("g"), want: false},
		{name: "allow of another operation",
			acls:      map[authz.Pattern][]authz.Entry{lit(authz.Group, "g"): {allow("User:alice", "*", authz.Describe)}},
			principal: "User:alice", op: authz.Read, res: group("g"), want: false},
		{name: "READ implies DESCRIBE",
			acls:      map[authz.Pattern][]authz.Entry{lit(authz.Group, "g"): {allow("User:alice", "*", authz.Read)}},
			principal: "User:alice", op: authz.Describe, res: group("g"), want: true},
		{name: "DELETE implies DESCRIBE",
			acls:      map[authz.Pattern][]authz.Entry{lit(authz.Group, "g"): {allow("User:alice", "*", authz.Delete)}},
			principal: "User:alice", op: authz.Describe, res: group("g"), want: true},
		{name: "DESCRIBE does not imply READ",
			acls:      map[authz.Pattern][]authz.Entry{lit(authz.Group, "g"): {allow("User:alice", "*", authz.Describe)}},
			principal: "User:alice", op: authz.Read, res: group("g"), want: false},
		{name: "ALL allows every operation",
			acls:      map[authz.Pattern][]authz.Entry{lit(authz.Group, "g"): {allow("User:alice", "*", authz.All)}},
			principal: "User:alice", op: authz.Delete, res: group("g"), want: true},
		{name: "wildcard resource",
			acls:      map[authz.Pattern][]authz.Entry{lit(authz.Group, "*"): {allow("User:alice", "*", authz.Read)}},
			principal: "User:alice", op: authz.Read, res: group("g"), want: true},
		{name: "wildcard principal",
			acls:      map[authz.Pattern][]authz.Entry{lit(authz.Group, "g"): {allow("User:*", "*", authz.Read)}},
			principal: "User:alice", op: authz.Read, res: group("g"), want: true},
		{name: "prefixed allow",
			acls:      map[authz.Pattern][]authz.Entry{pre(authz.Group, "billing-"): {allow("User:alice", "*", authz.Read)}},
			principal: "User:alice", op: authz.Read, res: group("billing-eu"), want: true},
		{name: "prefixed does not match a shorter name",
			acls:      map[authz.Pattern][]authz.Entry{pre(authz.Group, "billing-"): {allow("User:alice", "*", authz.Read)}},
			principal: "User:alice", op: authz.Read, res: group("billing"), want: false},
		{name: "prefixed is not a wildcard: the literal name * is",
			acls:      map[authz.Pattern][]authz.Entry{pre(authz.Group, "*"): {allow("User:alice", "*", authz.Read)}},
			principal: "User:alice", op: authz.Read, res: group("g"), want: false},
		{name: "deny over allow, same pattern",
			acls:      map[authz.Pattern][]authz.Entry{lit(authz.Group, "g"): {allow("User:alice", "*", authz.Read), deny("User:alice", "*", authz.Read)}},
			principal: "User:alice", op: authz.Read, res: group("g"), want: false},
		{name: "deny on the wildcard resource over a literal allow",
			acls: map[authz.Pattern][]authz.Entry{
				lit(authz.Group, "g"): {allow("User:alice", "*", authz.Read)},
				lit(authz.Group, "*"): {deny("User:alice", "*", authz.All)}},
			principal: "User:alice", op: authz.Read, res: group("g"), want: false},
		{name: "prefixed deny over a literal allow",
			acls: map[authz.Pattern][]authz.Entry{
				lit(authz.Group, "billing-eu"): {allow("User:alice", "*", authz.Read)},
				pre(authz.Group, "bill"):       {deny("User:*", "*", authz.Read)}},
			principal: "User:alice", op: authz.Read, res: group("billing-eu"), want: false},
		{name: "deny of READ does not deny DESCRIBE",
			acls:      map[authz.Pattern][]authz.Entry{lit(authz.Group, "g"): {allow("User:alice", "*", authz.Describe), deny("User:alice", "*", authz.Read)}},
			principal: "User:alice", op: authz.Describe, res: group("g"), want: true},
		{name: "deny for another principal does not apply",
			acls:      map[authz.Pattern][]authz.Entry{lit(authz.Group, "g"): {allow("User:alice", "*", authz.Read), deny("User:bob", "*", authz.Read)}},
			principal: "User:alice", op: authz.Read, res: group("g"), want: true},
		{name: "host match",
			acls:      map[authz.Pattern][]authz.Entry{lit(authz.Group, "g"): {allow("User:alice", "10.0.0.1", authz.Read)}},
			principal: "User:alice", host: "10.0.0.1", op: authz.Read, res: group("g"), want: true},
		{name: "host mismatch",
			acls:      map[authz.Pattern][]authz.Entry{lit(authz.Group, "g"): {allow("User:alice", "10.0.0.1", authz.Read)}},
			principal: "User:alice", host: "10.0.0.2", op: authz.Read, res: group("g"), want: false},
		{name: "deny from one host only",
			acls:      map[authz.Pattern][]authz.Entry{lit(authz.Group, "g"): {allow("User:alice", "*", authz.Read), deny("User:alice", "10.0.0.2", authz.Read)}},
			principal: "User:alice", host: "10.0.0.1", op: authz.Read, res: group("g"), want: true},
		{name: "super user without ACL",
			pol:       authz.Policy{SuperUsers: map[string]bool{"User:admin": true}},
			principal: "User:admin", op: authz.Delete, res: group("g"), want: true},
		{name: "super user over a deny",
			acls:      map[authz.Pattern][]authz.Entry{lit(authz.Group, "g"): {deny("User:*", "*", authz.All)}},
			pol:       authz.Policy{SuperUsers: map[string]bool{"User:admin": true}},
			principal: "User:admin", op: authz.Read, res: group("g"), want: true},
		{name: "a topic ACL is not a group ACL",
			acls:      map[authz.Pattern][]authz.Entry{lit(authz.Topic, "g"): {allow("User:alice", "*", authz.Read)}},
			principal: "User:alice", op: authz.Read, res: group("g"), want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := tc.host
			if host == "" {
				host = "127.0.0.1"
			}
			got := authz.NewTable(tc.acls).Authorize(&tc.pol, tc.principal, host, tc.op, tc.res)
			if got != tc.want {
				t.Fatalf("Authorize(%s, %s, %s, %s) = %v, want %v", tc.principal, host, tc.op, tc.res, got, tc.want)
			}
		})
	}
}

// The znode format Kafka writes (kafka.zk.ResourceZNode, AclEntry.toJsonCompatibleMap).
func TestDecodeEntries(t *testing.T) {
	got, err := authz.DecodeEntries([]byte(`{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"},{"principal":"User:bob","permissionType":"Deny","operation":"Describe","host":"10.0.0.1"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []authz.Entry{allow("User:alice", "*", authz.Read), deny("User:bob", "10.0.0.1", authz.Describe)}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("DecodeEntries = %+v, want %+v", got, want)
	}
	back, err := authz.DecodeEntries(authz.EncodeEntries(want))
	if err != nil || len(back) != 2 || back[0] != want[0] || back[1] != want[1] {
		t.Fatalf("round trip = %+v, %v", back, err)
	}
	for _, bad := range []string{
		`{"version":2,"acls":[]}`,
		`{"version":1,"acls":[{"principal":"User:a","permissionType":"Maybe","operation":"Read","host":"*"}]}`,
		`{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow","operation":"Fly","host":"*"}]}`,
		`{"version":1,"acls":[{"principal":"alice","permissionType":"Allow","operation":"Read","host":"*"}]}`,
		`not json`,
	} {
		if _, err := authz.DecodeEntries([]byte(bad)); err == nil {
			t.Errorf("DecodeEntries(%s) succeeded", bad)
		}
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]authz.ResourceType{"Group": authz.Group, "GROUP": authz.Group, "TRANSACTIONAL_ID": authz.TransactionalID, "TransactionalId": authz.TransactionalID} {
		if got, err := authz.ParseResourceType(in); err != nil || got != want {
			t.Errorf("ParseResourceType(%q) = %v, %v", in, got, err)
		}
	}
	for in, want := range map[string]authz.Operation{"Read": authz.Read, "DESCRIBE_CONFIGS": authz.DescribeConfigs, "all": authz.All} {
		if got, err := authz.ParseOperation(in); err != nil || got != want {
			t.Errorf("ParseOperation(%q) = %v, %v", in, got, err)
		}
	}
	su, err := authz.ParseSuperUsers("User:admin; User:ops;")
	if err != nil || !su["User:admin"] || !su["User:ops"] || len(su) != 2 {
		t.Fatalf("ParseSuperUsers = %v, %v", su, err)
	}
	if _, err := authz.ParseSuperUsers("admin"); err == nil {
		t.Fatal("a super user without a type was accepted")
	}
}

func FuzzDecodeEntries(f *testing.F) {
	f.Add([]byte(`{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := authz.DecodeEntries(data)
		if err != nil {
			return
		}
		back, err := authz.DecodeEntries(authz.EncodeEntries(es))
		if err != nil || len(back) != len(es) {
			t.Fatalf("re-decoding %d entries: %d, %v", len(es), len(back), err)
		}
	})
}
