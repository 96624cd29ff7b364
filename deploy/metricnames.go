package deploy

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

// promqlKeywords are PromQL words that look like identifiers but are not metric names.
var promqlKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
	"group_right": true, "bool": true, "and": true, "or": true, "unless": true, "offset": true,
	"inf": true, "nan": true, "atan2": true,
	// Aggregations may be followed by a grouping clause instead of "(": sum by (le) (...).
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true,
	"stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true,
	"quantile": true, "limitk": true, "limit_ratio": true,
}

// MetricNamesInPromQL returns the metric names a PromQL expression selects, in order of first
// appearance: identifiers that are not functions or aggregations (not followed by "("), not
// keywords, not label names (inside {} matchers or by/without/on/ignoring/group_* lists), not
// inside strings or range/offset brackets, and not Grafana variables ($name). It is a lexer, not
// a parser: enough for the expressions kvgate ships, which promtool validates separately.
func MetricNamesInPromQL(expr string) []string {
	s := []rune(expr)
	var names []string
	seen := map[string]bool{}
	isIdentStart := func(r rune) bool { return r == '_' || r == ':' || (r|0x20 >= 'a' && r|0x20 <= 'z') }
	isIdent := func(r rune) bool { return isIdentStart(r) || (r >= '0' && r <= '9') }
	skipTo := func(i int, close rune) int { // index just after the matching close
		for i < len(s) && s[i] != close {
			i++
		}
		return i + 1
	}
	nextNonSpace := func(i int) rune {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
		if i < len(s) {
			return s[i]
		}
		return 0
	}
	for i := 0; i < len(s); {
		r := s[i]
		switch {
		case r == '"' || r == '\'' || r == '`':
			j := i + 1
			for j < len(s) && s[j] != r {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
		case r == '{':
			i = skipTo(i, '}')
		case r == '[':
			i = skipTo(i, ']')
		case r == '$': // Grafana variable
			i++
			for i < len(s) && isIdent(s[i]) {
				i++
			}
		case r >= '0' && r <= '9' || (r == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9'):
			// A number, including exponents (1e-9) and durations (5m) outside brackets.
			i++
			for i < len(s) {
				c := s[i]
				if (c >= '0' && c <= '9') || c == '.' || isIdentStart(c) && c != ':' {
					i++
					continue
				}
				if (c == '-' || c == '+') && (s[i-1] == 'e' || s[i-1] == 'E') {
					i++
					continue
				}
				break
			}
		case isIdentStart(r):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			word := string(s[i:j])
			i = j
			lower := strings.ToLower(word)
			if nextNonSpace(j) == '(' {
				// A function or aggregation; a grouping clause's label list follows some words.
				switch lower {
				case "by", "without", "on", "ignoring", "group_left", "group_right":
					for i < len(s) && s[i] != '(' {
						i++
					}
					i = skipTo(i, ')')
				}
				continue
			}
			if promqlKeywords[lower] || seen[word] {
				continue
			}
			seen[word] = true
			names = append(names, word)
		default:
			i++
		}
	}
	return names
}

// sourceMetricName matches a string literal that begins with a kvgate or vLLM metric name,
// alone or followed by a label set or a value (hand-written exposition lines), or a
// "# TYPE"/"# HELP" line naming one.
var sourceMetricName = regexp.MustCompile(`^(?:#\s*(?:TYPE|HELP)\s+)?((?:kvgate_|vllm:)[a-zA-Z0-9_:]+)(?:$|[{\s])`)

// SourceMetricNames collects the metric names registered by the Go code under the given
// directories (relative to root; non-test files only): the Name of every prometheus
// CounterOpts/GaugeOpts/HistogramOpts/SummaryOpts literal (joined with Namespace and Subsystem
// when those are set), the first argument of prometheus.NewDesc and BuildFQName, and string
// literals that start with a kvgate_ or vllm: metric name (hand-written exposition). String
// constants of the same package are resolved. Files that do not parse are skipped and listed in
// the second result, so a half-written package does not hide the others.
func SourceMetricNames(root string, dirs ...string) (map[string]bool, []string, error) {
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
			return nil, nil, fmt.Errorf("deploy: scan %s: %w", d, err)
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
