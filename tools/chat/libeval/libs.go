package main

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
	"github.com/nikolalohinski/gonja/v2"
	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

// goldenNow is gen.py's NOW (datetime(2026, 7, 26, 9, 5, 3)).
var goldenNow = time.Date(2026, 7, 26, 9, 5, 3, 0, time.UTC)

var (
	days   = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	months = []string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}
)

// strftime: the C directives the golden templates use (%Y %m %d %b %B ...), fixed clock.
// The same function is registered in both libraries.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	p2 := func(n int) string { return fmt.Sprintf("%02d", n) }
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 == len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'y':
			b.WriteString(p2(t.Year() % 100))
		case 'm':
			b.WriteString(p2(int(t.Month())))
		case 'd':
			b.WriteString(p2(t.Day()))
		case 'e':
			b.WriteString(fmt.Sprintf("%2d", t.Day()))
		case 'H':
			b.WriteString(p2(t.Hour()))
		case 'M':
			b.WriteString(p2(t.Minute()))
		case 'S':
			b.WriteString(p2(t.Second()))
		case 'B':
			b.WriteString(months[t.Month()-1])
		case 'b', 'h':
			b.WriteString(months[t.Month()-1][:3])
		case 'A':
			b.WriteString(days[t.Weekday()])
		case 'a':
			b.WriteString(days[t.Weekday()][:3])
		case 'j':
			b.WriteString(fmt.Sprintf("%03d", t.YearDay()))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(f[i])
		}
	}
	return b.String()
}

// renderer is one library with one compiled template.
type renderer interface {
	render(rv *renderVars) (string, error)
}

// ---------------------------------------------------------------- (A) ardanlabs/jinja

type ardan struct{ t *jinja.Template }

func compileArdan(src string) (r renderer, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic in Compile: %v", p)
		}
	}()
	t, err := jinja.Compile(src)
	if err != nil {
		return nil, err
	}
	return &ardan{t}, nil
}

func toArdan(v *J) jinja.Value {
	switch v.K {
	case jNull:
		return jinja.None()
	case jBool:
		return jinja.NewBool(v.B)
	case jStr:
		return jinja.NewString(v.S)
	case jNum:
		if v.isInt() {
			if n, err := strconv.ParseInt(v.S, 10, 64); err == nil {
				return jinja.NewInt(n)
			}
		}
		return jinja.NewFloat(v.float()) // also integers beyond int64: no big ints
	case jArr:
		items := make([]jinja.Value, len(v.Arr))
		for i, x := range v.Arr {
			items[i] = toArdan(x)
		}
		return jinja.NewList(items)
	}
	d := jinja.NewDict()
	for _, k := range v.Keys {
		d.AsDict().Set(k, toArdan(v.Vals[k]))
	}
	return d
}

// ardanStrftime shadows the library's strftime_now (time.Now(), no fixed clock).
var ardanStrftime = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 || !args[0].IsString() {
		return jinja.Undefined(), errors.New("strftime_now() missing 1 required positional argument: 'format'")
	}
	return jinja.NewString(strftime(goldenNow, args[0].AsString())), nil
})

func ardanValues(rv *renderVars) map[string]jinja.Value {
	data := make(map[string]jinja.Value, len(rv.vars)+1)
	for _, k := range rv.vars {
		data[k] = toArdan(rv.vals[k])
	}
	data["strftime_now"] = ardanStrftime
	return data
}

func (a *ardan) render(rv *renderVars) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic in Render: %v", p)
		}
	}()
	return a.t.RenderValues(ardanValues(rv))
}

// ---------------------------------------------------------------- (B) gonja/v2

type gonjaT struct{ t *exec.Template }

var (
	gonjaConfig = func() *config.Config {
		c := config.New()
		c.TrimBlocks = true      // trim_blocks=True
		c.LeftStripBlocks = true // lstrip_blocks=True
		return c                 // KeepTrailingNewline=false is the default, as in Jinja2
	}()
	gonjaEnv = &exec.Environment{
		Context: exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables).Update(exec.NewContext(map[string]any{
			"raise_exception": func(msg string) (string, error) { return "", errors.New(msg) },
			"strftime_now":    func(f string) string { return strftime(goldenNow, f) },
		})),
		Filters:           builtins.Filters,
		Tests:             builtins.Tests,
		ControlStructures: builtins.ControlStructures,
		Methods:           builtins.Methods,
	}
)

func init() { gonja.SetLoggerOutput(io.Discard) }

func compileGonja(src string) (renderer, error) { return compileGonjaEnv(src, gonjaEnv) }

func compileGonjaEnv(src string, env *exec.Environment) (r renderer, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic in NewTemplate: %v", p)
		}
	}()
	// as gonja.FromBytes, with our config and environment
	root := fmt.Sprintf("root-%x", sha256.Sum256([]byte(src)))
	fs, err := loaders.NewFileSystemLoader("")
	if err != nil {
		return nil, err
	}
	l, err := loaders.NewShiftedLoader(root, bytes.NewReader([]byte(src)), fs)
	if err != nil {
		return nil, err
	}
	t, err := exec.NewTemplate(root, gonjaConfig, l, env)
	if err != nil {
		return nil, err
	}
	return &gonjaT{t}, nil
}

func toGonja(v *J) any {
	switch v.K {
	case jNull:
		return nil
	case jBool:
		return v.B
	case jStr:
		return v.S
	case jNum:
		if v.isInt() {
			if n, err := strconv.ParseInt(v.S, 10, 64); err == nil {
				return int(n)
			}
		}
		return v.float()
	case jArr:
		items := make([]any, len(v.Arr))
		for i, x := range v.Arr {
			items[i] = toGonja(x)
		}
		return items
	}
	// Go map: gonja iterates map keys sorted (case-insensitively); document order is lost.
	m := make(map[string]any, len(v.Keys))
	for _, k := range v.Keys {
		m[k] = toGonja(v.Vals[k])
	}
	return m
}

func gonjaContext(rv *renderVars) *exec.Context {
	data := make(map[string]any, len(rv.vars))
	for _, k := range rv.vars {
		data[k] = toGonja(rv.vals[k])
	}
	return exec.NewContext(data)
}

func (g *gonjaT) render(rv *renderVars) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic in Execute: %v", p)
		}
	}()
	return g.t.ExecuteToString(gonjaContext(rv))
}
