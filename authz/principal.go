package authz

import (
	"crypto/x509"
	"fmt"
	"regexp"
	"strings"
)

// Anonymous is the principal of a connection that did not authenticate (Kafka's
// KafkaPrincipal.ANONYMOUS): plaintext, or TLS without a client certificate.
const Anonymous = "User:ANONYMOUS"

// Rules maps a client certificate's distinguished name to a user name, as Kafka's
// ssl.principal.mapping.rules (SslPrincipalMapper): the first rule whose pattern matches the
// whole name applies; DEFAULT keeps the name as it is; no rule matching is an error, and the
// connection is refused.
type Rules struct {
	rules []rule
}

type rule struct {
	def     bool
	pattern *regexp.Regexp
	replace string
	lower   bool
	upper   bool
}

// ParseRules reads rules separated by commas or newlines: "RULE:pattern/replacement/[LU]" or
// "DEFAULT". Empty: DEFAULT. A "/" inside a pattern or replacement is written "\/". Go's
// regexp syntax, with $1 for groups as in Java.
func ParseRules(s string) (*Rules, error) {
	r := &Rules{}
	rest := s
	for {
		rest = strings.TrimLeft(rest, " \t\r\n,")
		if rest == "" {
			break
		}
		switch {
		case strings.HasPrefix(rest, "DEFAULT"):
			r.rules = append(r.rules, rule{def: true})
			rest = rest[len("DEFAULT"):]
		case strings.HasPrefix(rest, "RULE:"):
			rest = rest[len("RULE:"):]
			pat, after, ok := cutUnescaped(rest)
			if !ok {
				return nil, fmt.Errorf("authz: mapping rule %q: want RULE:pattern/replacement/", s)
			}
			repl, after, ok := cutUnescaped(after)
			if !ok {
				return nil, fmt.Errorf("authz: mapping rule %q: want RULE:pattern/replacement/", s)
			}
			re, err := regexp.Compile("^(?:" + pat + ")$")
			if err != nil {
				return nil, fmt.Errorf("authz: mapping rule pattern %q: %w", pat, err)
			}
			ru := rule{pattern: re, replace: repl}
			if after != "" && (after[0] == 'L' || after[0] == 'U') {
				ru.lower, ru.upper = after[0] == 'L', after[0] == 'U'
				after = after[1:]
			}
			r.rules = append(r.rules, ru)
			rest = after
		default:
			return nil, fmt.Errorf("authz: mapping rules %q: want RULE:... or DEFAULT at %q", s, rest)
		}
		rest = strings.TrimLeft(rest, " \t")
		if rest != "" && rest[0] != ',' && rest[0] != '\n' && rest[0] != '\r' {
			return nil, fmt.Errorf("authz: mapping rules %q: unexpected %q", s, rest)
		}
	}
	if len(r.rules) == 0 {
		r.rules = []rule{{def: true}}
	}
	return r, nil
}

// cutUnescaped cuts s at its first "/" not preceded by a backslash, unescaping "\/".
func cutUnescaped(s string) (before, after string, ok bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == '/':
			b.WriteByte('/')
			i++
		case s[i] == '/':
			return b.String(), s[i+1:], true
		default:
			b.WriteByte(s[i])
		}
	}
	return "", "", false
}

// Map applies the rules to a distinguished name.
func (r *Rules) Map(dn string) (string, error) {
	for _, ru := range r.rules {
		if ru.def {
			return dn, nil
		}
		m := ru.pattern.FindStringSubmatchIndex(dn)
		if m == nil {
			continue
		}
		out := string(ru.pattern.ExpandString(nil, ru.replace, dn, m))
		switch {
		case ru.lower:
			out = strings.ToLower(out)
		case ru.upper:
			out = strings.ToUpper(out)
		}
		return out, nil
	}
	return "", fmt.Errorf("authz: no principal mapping rule matches %q", dn)
}

// CertificatePrincipal is the principal of a client certificate: "User:" and its subject's
// distinguished name (RFC 2253, as Java's X500Principal.getName(): "CN=alice,OU=eng,O=corp"),
// mapped by rules (nil: DEFAULT).
func CertificatePrincipal(cert *x509.Certificate, rules *Rules) (string, error) {
	dn := cert.Subject.String()
	if rules == nil {
		return "User:" + dn, nil
	}
	name, err := rules.Map(dn)
	if err != nil {
		return "", err
	}
	return "User:" + name, nil
}
