package metricnames

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// sourceMetricName matches a string literal that begins with a kvgate or vLLM metric name,
// alone or followed by a label set or a value (hand-written exposition lines), or a
// "# TYPE"/"# HELP" line naming one.
var sourceMetricName = regexp.MustCompile(`^(?:#\s*(?:TYPE|HELP)\s+)?((?:kvgate_|vllm:)[a-zA-Z0-9_:]+)(?:$|[{\s])`)

// Source collects the metric names registered by the Go code under the given
// directories (relative to root; non-test files only): the Name of every prometheus
// CounterOpts/GaugeOpts/HistogramOpts/SummaryOpts literal (joined with Namespace and Subsystem
// when those are set), the first argument of prometheus.NewDesc and BuildFQName, and string
// literals that start with a kvgate_ or vllm: metric name (hand-written exposition). String
// constants of the same package are resolved. Files that do not parse are skipped and listed in
// the second result, so a half-written package does not hide the others.
func Source(root string, dirs ...string) (map[string]bool, []string, error) {
	names := map[string]bool{}
	var unparsed []string
	for _, d := range dirs {
		pkgDirs := map[string][]string{}
		err := filepath.WalkDir(filepath.Join(root, d), func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() && (e.Name() == "testdata" || e.Name() == "node_modules") {
				return filepath.SkipDir
			}
			if !e.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				pkgDirs[filepath.Dir(path)] = append(pkgDirs[filepath.Dir(path)], path)
			}
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("metricnames: scan %s: %w", d, err)
		}
		for _, files := range pkgDirs {
			unparsed = append(unparsed, scanPackage(files, names)...)
		}
	}
	return names, unparsed, nil
}

// scanPackage adds the metric names of one package's files to names and returns the files that
// failed to parse.
func scanPackage(files []string, names map[string]bool) []string {
	fset := token.NewFileSet()
	var parsed []*ast.File
	var bad []string
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			bad = append(bad, f)
			if af == nil {
				continue
			}
		}
		parsed = append(parsed, af)
	}
	consts := map[string]string{}
	for _, af := range parsed {
		for _, decl := range af.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if v, ok := stringLit(vs.Values[i], nil); ok {
							consts[n.Name] = v
						}
					}
				}
			}
		}
	}
	for _, af := range parsed {
		ast.Inspect(af, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CompositeLit:
				if !isPromOpts(x.Type) {
					return true
				}
				var ns, sub, name string
				for _, el := range x.Elts {
					kv, ok := el.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					key, _ := kv.Key.(*ast.Ident)
					if key == nil {
						continue
					}
					v, _ := stringLit(kv.Value, consts)
					switch key.Name {
					case "Namespace":
						ns = v
					case "Subsystem":
						sub = v
					case "Name":
						name = v
					}
				}
				if name != "" {
					names[fqName(ns, sub, name)] = true
				}
			case *ast.CallExpr:
				sel, ok := x.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch sel.Sel.Name {
				case "NewDesc":
					if len(x.Args) > 0 {
						if v, ok := stringLit(x.Args[0], consts); ok {
							names[v] = true
						}
					}
				case "BuildFQName":
					if len(x.Args) == 3 {
						a, _ := stringLit(x.Args[0], consts)
						b, _ := stringLit(x.Args[1], consts)
						c, ok := stringLit(x.Args[2], consts)
						if ok {
							names[fqName(a, b, c)] = true
						}
					}
				}
			case *ast.BasicLit:
				if v, ok := stringLit(x, nil); ok {
					if m := sourceMetricName.FindStringSubmatch(v); m != nil {
						names[m[1]] = true
					}
				}
			}
			return true
		})
	}
	return bad
}

// isPromOpts reports whether t names one of client_golang's metric option structs.
func isPromOpts(t ast.Expr) bool {
	var name string
	switch x := t.(type) {
	case *ast.SelectorExpr:
		name = x.Sel.Name
	case *ast.Ident:
		name = x.Name
	default:
		return false
	}
	switch name {
	case "CounterOpts", "GaugeOpts", "HistogramOpts", "SummaryOpts", "UntypedOpts", "Opts":
		return true
	}
	return false
}

// stringLit evaluates a string literal, a constant of the package, or a + concatenation of those.
func stringLit(e ast.Expr, consts map[string]string) (string, bool) {
	switch x := e.(type) {
	case *ast.BasicLit:
		if x.Kind != token.STRING {
			return "", false
		}
		v, err := strconv.Unquote(x.Value)
		return v, err == nil
	case *ast.Ident:
		v, ok := consts[x.Name]
		return v, ok
	case *ast.BinaryExpr:
		if x.Op != token.ADD {
			return "", false
		}
		a, ok1 := stringLit(x.X, consts)
		b, ok2 := stringLit(x.Y, consts)
		return a + b, ok1 && ok2
	case *ast.ParenExpr:
		return stringLit(x.X, consts)
	}
	return "", false
}

// fqName joins namespace, subsystem and name with underscores as prometheus.BuildFQName does.
func fqName(ns, sub, name string) string {
	parts := make([]string, 0, 3)
	for _, p := range []string{ns, sub, name} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "_")
}
