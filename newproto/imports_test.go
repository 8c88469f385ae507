package newproto

import (
	"go/build"
	"slices"
	"strings"
	"testing"
)

// DESIGN.md section 2: newproto declares the interfaces it consumes and
// never imports bridge, relay, zkstate or legacy (bridge/group, the pure
// engine, is allowed, and so are the leaf packages of security and connlimit). Its
// external tests may use the test kits.
func TestImportBoundaries(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	const module = "github.com/zkbridge/zkbridge/"
	for _, imp := range append(append(pkg.Imports, pkg.TestImports...), pkg.XTestImports...) {
		if !strings.HasPrefix(imp, module) {
			continue
		}
		switch rest := strings.TrimPrefix(imp, module); {
		case rest == "bridge/group":
		case rest == "tlsconfig", rest == "tlsconfig/tlstest", rest == "authz", rest == "sasl", rest == "connlimit":
			// Leaf packages: TLS from files, the tests' certificates, connection caps.
		case rest == "newproto":
		case (rest == "kafkatest" || rest == "zkstate/zktest") && slices.Contains(pkg.XTestImports, imp) &&
			!slices.Contains(pkg.Imports, imp) && !slices.Contains(pkg.TestImports, imp):
		default:
			t.Errorf("newproto imports %s", imp)
		}
	}
}
