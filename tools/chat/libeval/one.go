package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// runOne prints each library's render of one (sweep or golden template, conversation) as JSON strings.
func runOne(spec string, convs []conv, tmpls []tmpl) {
	name, id, _ := strings.Cut(spec, "/")
	var t *tmpl
	for i := range tmpls {
		if tmpls[i].name == name {
			t = &tmpls[i]
		}
	}
	format := "string"
	if t == nil {
		sw, gold := loadSweep()
		for i := range sw {
			if sw[i].name == name {
				t = &sw[i]
			}
		}
		format = gold[name][id].Format
	} else {
		format = loadGolden(name)[id].Format
	}
	_ = filepath.Join
	for _, c := range convs {
		if c.id != id {
			continue
		}
		rv, err := buildVars(t.src, templateNames(t.src), t.special, c.req, format)
		if err != nil {
			fmt.Println("rejected:", err)
			return
		}
		for _, l := range []struct {
			n string
			c func(string) (renderer, error)
		}{{"ardanlabs", compileArdan}, {"gonja", compileGonja}} {
			r, err := l.c(t.src)
			out := ""
			if err == nil {
				out, err = r.render(rv)
			}
			fmt.Fprintf(os.Stdout, "%s\t%q\t%v\n", l.n, out, err)
		}
	}
}
