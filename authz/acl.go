// Package authz decides, as a Kafka broker's ZooKeeper-based authorizer (AclAuthorizer) does,
// whether a principal may perform an operation on a resource, from the ACLs Kafka keeps in
// ZooKeeper; Follow keeps a Table current from those znodes and their change notifications.
//
// The decision (Table.Authorize) is pure: super users first, then, among the ACLs whose pattern
// matches the resource (literal name, the literal wildcard "*", every prefixed pattern the name
// starts with), no ACL at all allows only with allow.everyone.if.no.acl.found; a matching DENY
// wins over any ALLOW; READ, WRITE, DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS implies
// DESCRIBE_CONFIGS, ALL matches every operation; principal "User:*" and host "*" match anyone.
package authz

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
)

// ResourceType is a kind of resource, named as in Kafka's ZooKeeper paths (/kafka-acl/Group).
type ResourceType int8

// The resource types the bridge authorizes (and the others Kafka stores, read and ignored).
const (
	UnknownResource ResourceType = iota
	Topic
	Group
	Cluster
	TransactionalID
	DelegationToken
	User
)

var resourceNames = map[ResourceType]string{
	Topic: "Topic", Group: "Group", Cluster: "Cluster", TransactionalID: "TransactionalId",
	DelegationToken: "DelegationToken", User: "User",
}

func (t ResourceType) String() string {
	if n, ok := resourceNames[t]; ok {
		return n
	}
	return fmt.Sprintf("ResourceType(%d)", int8(t))
}

// ParseResourceType reads a resource type as Kafka writes it: "Group" in paths, "GROUP" in
// extended change events (ResourceType.fromString is case-insensitive; "TRANSACTIONAL_ID"
// too).
func ParseResourceType(s string) (ResourceType, error) {
	norm := strings.ReplaceAll(strings.ToLower(s), "_", "")
	for t, n := range resourceNames {
		if strings.ToLower(n) == norm {
			return t, nil
		}
	}
	return UnknownResource, fmt.Errorf("authz: unknown resource type %q", s)
}

// ClusterName is the name of the one Cluster resource.
const ClusterName = "kafka-cluster"

// Wildcard as a literal resource name matches every resource of its type; as a principal's
// name ("User:*") every principal; as a host every host.
const Wildcard = "*"

// Operation is an ACL operation.
type Operation int8

// Operations, as Kafka's AclOperation.
const (
	UnknownOperation Operation = iota
	All
	Read
	Write
	Create
	Delete
	Alter
	Describe
	ClusterAction
	DescribeConfigs
	AlterConfigs
	IdempotentWrite
	CreateTokens
	DescribeTokens
)

var operationNames = map[Operation]string{
	All: "All", Read: "Read", Write: "Write", Create: "Create", Delete: "Delete", Alter: "Alter",
	Describe: "Describe", ClusterAction: "ClusterAction", DescribeConfigs: "DescribeConfigs",
	AlterConfigs: "AlterConfigs", IdempotentWrite: "IdempotentWrite", CreateTokens: "CreateTokens",
	DescribeTokens: "DescribeTokens",
}

func (o Operation) String() string {
	if n, ok := operationNames[o]; ok {
		return n
	}
	return fmt.Sprintf("Operation(%d)", int8(o))
}

// ParseOperation reads an operation as Kafka writes it ("Read", "READ", "DESCRIBE_CONFIGS").
func ParseOperation(s string) (Operation, error) {
	norm := strings.ReplaceAll(strings.ToLower(s), "_", "")
	for o, n := range operationNames {
		if strings.ToLower(n) == norm {
			return o, nil
		}
	}
	return UnknownOperation, fmt.Errorf("authz: unknown operation %q", s)
}

// implied lists the operations whose ALLOW also allows op (Kafka's AclAuthorizer: DESCRIBE is
// implied by READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS).
func implied(op Operation) []Operation {
	switch op {
	case Describe:
		return impliesDescribe
	case DescribeConfigs:
		return impliesDescribeConfigs
	}
	if int(op) < len(itself) {
		return itself[op : op+1]
	}
	return []Operation{op}
}

// Static, so that a decision allocates nothing.
var (
	impliesDescribe        = []Operation{Describe, Read, Write, Delete, Alter}
	impliesDescribeConfigs = []Operation{DescribeConfigs, AlterConfigs}
	itself                 = []Operation{UnknownOperation, All, Read, Write, Create, Delete, Alter, Describe,
		ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, CreateTokens, DescribeTokens}
)

// PatternType says how an ACL's resource name matches.
type PatternType int8

// Pattern types stored in ZooKeeper.
const (
	Literal PatternType = iota
	Prefixed
)

func (p PatternType) String() string {
	if p == Prefixed {
		return "PREFIXED"
	}
	return "LITERAL"
}

// Resource is what an operation is performed on.
type Resource struct {
	Type ResourceType
	Name string
}

func (r Resource) String() string { return r.Type.String() + ":" + r.Name }

// Pattern is the resource part of an ACL: a resource name, literal or a prefix.
type Pattern struct {
	Type        ResourceType
	Name        string
	PatternType PatternType
}

func (p Pattern) String() string {
	return p.Type.String() + ":" + p.PatternType.String() + ":" + p.Name
}

// Entry is one access control entry (Kafka's AclEntry).
type Entry struct {
	Principal string // "User:alice", "User:*"
	Host      string // an IP address, or "*"
	Operation Operation
	Allow     bool // permissionType Allow; false: Deny
}

// entryJSON is one ACL as Kafka writes it in a resource znode.
type entryJSON struct {
	Principal      string `json:"principal"`
	PermissionType string `json:"permissionType"`
	Operation      string `json:"operation"`
	Host           string `json:"host"`
}

// DecodeEntries reads a resource znode's data: {"version":1,"acls":[{"principal":"User:alice",
// "permissionType":"Allow","operation":"Read","host":"*"}]}. An entry with an operation or
// permission this version does not know is an error: guessing could allow too much.
func DecodeEntries(data []byte) ([]Entry, error) {
	var doc struct {
		Version int         `json:"version"`
		ACLs    []entryJSON `json:"acls"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("authz: ACL znode: %w", err)
	}
	if doc.Version != 1 {
		return nil, fmt.Errorf("authz: ACL znode version %d, want 1", doc.Version)
	}
	out := make([]Entry, 0, len(doc.ACLs))
	for _, a := range doc.ACLs {
		op, err := ParseOperation(a.Operation)
		if err != nil {
			return nil, err
		}
		var allow bool
		switch strings.ToLower(a.PermissionType) {
		case "allow":
			allow = true
		case "deny":
		default:
			return nil, fmt.Errorf("authz: unknown permission type %q", a.PermissionType)
		}
		if !strings.Contains(a.Principal, ":") {
			return nil, fmt.Errorf("authz: principal %q is not type:name", a.Principal)
		}
		out = append(out, Entry{Principal: a.Principal, Host: a.Host, Operation: op, Allow: allow})
	}
	return out, nil
}

// EncodeEntries writes entries in Kafka's resource znode format (tests and tools write ACLs
// the way kafka-acls does).
func EncodeEntries(entries []Entry) []byte {
	doc := struct {
		Version int         `json:"version"`
		ACLs    []entryJSON `json:"acls"`
	}{Version: 1, ACLs: []entryJSON{}}
	for _, e := range entries {
		perm := "Deny"
		if e.Allow {
			perm = "Allow"
		}
		doc.ACLs = append(doc.ACLs, entryJSON{Principal: e.Principal, PermissionType: perm, Operation: e.Operation.String(), Host: e.Host})
	}
	b, _ := json.Marshal(doc) // strings and ints only
	return b
}

// Policy is the authorizer's configuration beyond the ACLs.
type Policy struct {
	// SuperUsers are allowed everything (super.users: "User:admin;User:ops").
	SuperUsers map[string]bool
	// AllowIfNoACL allows an operation on a resource no ACL matches
	// (allow.everyone.if.no.acl.found; false, Kafka's default, denies it).
	AllowIfNoACL bool
}

// ParseSuperUsers reads super.users: principals separated by semicolons.
func ParseSuperUsers(s string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, p := range strings.Split(s, ";") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !strings.Contains(p, ":") {
			return nil, fmt.Errorf("authz: super user %q is not type:name (User:alice)", p)
		}
		out[p] = true
	}
	return out, nil
}

// Table is an immutable set of ACLs by pattern.
type Table struct {
	literal  map[Resource][]Entry
	prefixed map[Resource][]Entry // Resource.Name is the prefix
}

// NewTable builds a table from ACLs by pattern.
func NewTable(acls map[Pattern][]Entry) *Table {
	t := &Table{literal: map[Resource][]Entry{}, prefixed: map[Resource][]Entry{}}
	for p, es := range acls {
		if len(es) == 0 {
			continue
		}
		r := Resource{Type: p.Type, Name: p.Name}
		if p.PatternType == Prefixed {
			t.prefixed[r] = es
		} else {
			t.literal[r] = es
		}
	}
	return t
}

// Len is the number of patterns with ACLs.
func (t *Table) Len() int { return len(t.literal) + len(t.prefixed) }

// Authorize decides whether principal, connected from host (an IP address), may perform op on
// res.
func (t *Table) Authorize(pol *Policy, principal, host string, op Operation, res Resource) bool {
	if pol.SuperUsers[principal] {
		return true
	}
	found := false
	allowed := false
	allowOps := implied(op)
	check := func(es []Entry) bool { // false: a DENY matched
		if len(es) > 0 {
			found = true
		}
		for _, e := range es {
			if !matchPrincipal(e.Principal, principal) || (e.Host != Wildcard && e.Host != host) {
				continue
			}
			if !e.Allow {
				if e.Operation == op || e.Operation == All {
					return false
				}
				continue
			}
			if !allowed {
				if e.Operation == All {
					allowed = true
					continue
				}
				for _, o := range allowOps {
					if e.Operation == o {
						allowed = true
						break
					}
				}
			}
		}
		return true
	}
	if !check(t.literal[res]) || !check(t.literal[Resource{Type: res.Type, Name: Wildcard}]) {
		return false
	}
	if len(t.prefixed) > 0 {
		for i := 1; i <= len(res.Name); i++ {
			if !check(t.prefixed[Resource{Type: res.Type, Name: res.Name[:i]}]) {
				return false
			}
		}
	}
	if !found {
		return pol.AllowIfNoACL
	}
	return allowed
}

func matchPrincipal(acl, principal string) bool {
	if acl == principal {
		return true
	}
	// "User:*" matches every principal of type User.
	typ, name, ok := strings.Cut(acl, ":")
	return ok && name == Wildcard && strings.HasPrefix(principal, typ+":")
}

// Authorizer holds the current Table; Authorize may be called concurrently with Set.
type Authorizer struct {
	pol   Policy
	table atomic.Pointer[Table]
}

// New returns an Authorizer with no ACLs yet.
func New(pol Policy) *Authorizer {
	a := &Authorizer{pol: pol}
	a.table.Store(NewTable(nil))
	return a
}

// Set replaces the ACLs.
func (a *Authorizer) Set(t *Table) { a.table.Store(t) }

// Table is the current ACLs.
func (a *Authorizer) Table() *Table { return a.table.Load() }

// Authorize decides with the current ACLs.
func (a *Authorizer) Authorize(principal, host string, op Operation, res Resource) bool {
	return a.table.Load().Authorize(&a.pol, principal, host, op, res)
}
