// Module-wide rules of the layout (DESIGN.md §2): which packages may import which, that no
// program links package testing, and that no function in pkg/ or cmd/ outgrows a reader's
// screen.
package kvgate_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/harness"
)

const module = "github.com/kvgate/kvgate/"

// allowedImports lists, per package (or package prefix ending in "/"), the module packages it may
// import directly (DESIGN.md §2): a request moves down router (the HTTP surface) → endpoint
// (each API's parse, prompt and writers) → pipeline (admission, routing, pairs, the engine call,
// relay) → admission, clientauth, fleet, openai, chat, engine, policy, indexer, tokenizer →
// worker (admission imports nothing of the module: the pipeline instantiates its queue with the
// fleet's members); the fleet's work (membership, health,
// event sources) down fleet → engine, kvbridge, discovery, indexer → worker; an event batch
// down kvbridge → indexer → worker; a membership change from discovery (DNS names → worker
// specs) → worker, wired into the fleet by cmd/gateway; cmd/* → pkg/*; nothing imports router
// or cmd. Generated api packages may import each other. A package missing from the table may
// import nothing of the module, so a new package has to be placed here deliberately.
var allowedImports = map[string][]string{
	"api/":                      {"api/"},
	"pkg/worker":                {},
	"pkg/tokenizer":             {},
	"pkg/openai":                {},
	"pkg/anthropic":             {"pkg/openai"},
	"pkg/chat":                  {"pkg/openai", "pkg/tokenizer", "pkg/chat/internal/pyfloat"},
	"pkg/chat/parse":            {"pkg/openai", "pkg/chat/internal/pyfloat"},
	"pkg/chat/internal/pyfloat": {},
	"pkg/indexer":               {"pkg/worker"},
	"pkg/policy":                {"pkg/indexer", "pkg/worker"},
	"pkg/kvbridge":              {"pkg/indexer", "pkg/worker", "api/"},
	"pkg/engine":                {"pkg/openai", "pkg/chat/parse", "pkg/tokenizer", "pkg/worker", "api/"},
	"pkg/sim":                   {"pkg/openai", "pkg/chat", "pkg/chat/parse", "pkg/tokenizer", "pkg/kvbridge", "pkg/indexer", "pkg/worker", "api/"},
	"pkg/discovery":             {"pkg/worker"},
	"pkg/clientauth":            {"pkg/openai"},
	"pkg/admission":             {},
	"pkg/tracing":               {},
	"pkg/fleet":                 {"pkg/engine", "pkg/kvbridge", "pkg/discovery", "pkg/indexer", "pkg/worker"},
	"pkg/pipeline":              {"pkg/admission", "pkg/clientauth", "pkg/fleet", "pkg/openai", "pkg/chat", "pkg/chat/parse", "pkg/engine", "pkg/policy", "pkg/indexer", "pkg/tokenizer", "pkg/worker"},
	"pkg/endpoint":              {"pkg/pipeline", "pkg/openai", "pkg/anthropic", "pkg/chat/parse", "pkg/clientauth", "pkg/conversation", "pkg/engine"},
	"pkg/router":                {"pkg/endpoint", "pkg/pipeline", "pkg/clientauth", "pkg/fleet", "pkg/openai", "pkg/anthropic", "pkg/conversation", "pkg/worker"},
	"pkg/conversation":          {"pkg/openai"},
	"cmd/":                      {"pkg/", "api/", "internal/"},
	"internal/":                 {"pkg/", "api/", "internal/"},
	"test/":                     {"pkg/", "api/", "internal/", "deploy"},
	"tools/":                    {"pkg/", "api/", "internal/", "deploy"},
	"deploy":                    {},
}

// rule returns the allow list of pkg (relative to the module).
func rule(pkg string) ([]string, bool) {
	if r, ok := allowedImports[pkg]; ok {
		return r, true
	}
	best := ""
	for k := range allowedImports {
		if strings.HasSuffix(k, "/") && strings.HasPrefix(pkg, k) && len(k) > len(best) {
			best = k
		}
	}
	r, ok := allowedImports[best]
	return r, ok && best != ""
}

func allowed(list []string, imp string) bool {
	return slices.ContainsFunc(list, func(a string) bool {
		return a == imp || (strings.HasSuffix(a, "/") && strings.HasPrefix(imp, a))
	})
}

// TestImportRules runs `go list` over the module and fails on any forbidden edge among the
// production (non-test) imports.
func TestImportRules(t *testing.T) {
	out := goList(t, "-e", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"...")
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pkg := strings.TrimPrefix(f[0], module)
		list, ok := rule(pkg)
		if !ok {
			list = nil
		}
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			imp = strings.TrimPrefix(imp, module)
			checked++
			if !allowed(list, imp) {
				t.Errorf("%s imports %s: forbidden by DESIGN.md §2", pkg, imp)
			}
			if strings.HasPrefix(imp, "cmd/") || (imp == "pkg/router" && !strings.HasPrefix(pkg, "cmd/")) {
				t.Errorf("%s imports %s: nothing may import router or cmd", pkg, imp)
			}
		}
	}
	if checked == 0 {
		t.Fatal("go list reported no module imports; the check checked nothing")
	}
}

// TestProgramsDoNotLinkTesting: no command or tool links package testing (tools/bench uses the
// process harness, internal/harness, which must stay free of it; issue 17).
func TestProgramsDoNotLinkTesting(t *testing.T) {
	deps := strings.Fields(goList(t, "-deps", "-f", "{{.ImportPath}}", module+"cmd/...", module+"tools/..."))
	if len(deps) == 0 {
		t.Fatal("go list -deps reported nothing; the check checked nothing")
	}
	if slices.Contains(deps, "testing") {
		t.Errorf("a package under cmd/ or tools/ links testing; see go list -deps ./cmd/... ./tools/... and go mod why")
	}
}

// goList runs the go command's list with args in the module and returns its standard output.
func goList(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if err := harness.Run(t.Context(), harness.Command{Path: "go", Args: append([]string{"list"}, args...)}, &out, &errb); err != nil {
		t.Fatalf("go list: %v\n%s", err, errb.String())
	}
	return out.String()
}

func TestImportRuleTable(t *testing.T) {
	tests := []struct {
		pkg, imp string
		want     bool
	}{
		{"pkg/pipeline", "pkg/policy", true},
		{"pkg/endpoint", "pkg/fleet", false}, // endpoints adapt requests; the pipeline routes them
		{"pkg/pipeline", "pkg/endpoint", false},
		{"pkg/pipeline", "pkg/router", false},
		{"pkg/policy", "pkg/router", false},
		{"pkg/indexer", "pkg/kvbridge", false},
		{"pkg/kvbridge", "pkg/policy", false},
		{"pkg/kvbridge", "pkg/router", false},
		{"pkg/engine", "pkg/router", false},
		{"pkg/engine", "pkg/policy", false},
		{"pkg/openai", "pkg/worker", false},
		{"pkg/chat", "pkg/engine", false},
		{"pkg/chat/parse", "pkg/chat", false},
		{"pkg/engine", "pkg/chat", false},
		{"pkg/engine", "pkg/chat/parse", true},
		{"pkg/indexer", "pkg/policy", false},
		{"pkg/worker", "pkg/indexer", false},
		{"cmd/gateway", "pkg/router", true},
		{"pkg/kvbridge", "api/vllm", true},
		{"pkg/pipeline", "api/vllm", false}, // the pipeline speaks to engines only through pkg/engine
		{"pkg/newthing", "pkg/worker", false},
		{"pkg/discovery", "pkg/worker", true},
		{"pkg/discovery", "pkg/router", false},
		{"pkg/pipeline", "pkg/kvbridge", false}, // the fleet wires the event sources
		{"pkg/fleet", "pkg/router", false},
		{"pkg/fleet", "pkg/policy", false}, // the fleet offers candidates; routing picks
		{"pkg/clientauth", "pkg/fleet", false},
	}
	for _, tt := range tests {
		list, _ := rule(tt.pkg)
		if got := allowed(list, tt.imp); got != tt.want {
			t.Errorf("%s → %s: got %v, want %v", tt.pkg, tt.imp, got, tt.want)
		}
	}
}

// maxFuncLines is the longest function (from its func line to its closing brace) the module's
// pkg/ and cmd/ may hold: a function longer than a screen holds more than one step.
const maxFuncLines = 100

// TestFunctionLength fails for every function or method in a non-test, non-generated Go file
// under pkg/ or cmd/ that is longer than maxFuncLines.
func TestFunctionLength(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	for _, root := range []string{"pkg", "cmd"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				return err
			}
			if ast.IsGenerated(f) {
				return nil
			}
			for _, decl := range f.Decls {
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				checked++
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
					t.Errorf("%s: %s is %d lines, more than %d: split it into its steps", fset.Position(fd.Pos()), funcName(fd), n, maxFuncLines)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked == 0 {
		t.Fatal("no function checked; the check checked nothing")
	}
}

// funcName returns fd's name, with its receiver type for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	for {
		switch e := typ.(type) {
		case *ast.StarExpr:
			typ = e.X
			continue
		case *ast.IndexExpr:
			typ = e.X
			continue
		case *ast.IndexListExpr:
			typ = e.X
			continue
		case *ast.Ident:
			return e.Name + "." + fd.Name.Name
		}
		return fd.Name.Name
	}
}
