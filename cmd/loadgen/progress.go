package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// isTerminal reports whether f is a character device (a terminal), without a dependency.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progress redraws one status line on w every interval until stop is called. The goroutine is
// owned by start/stop: stop cancels and joins it, then prints the final state.
type progress struct {
	w        io.Writer
	total    int
	done     func() (done, errs int64)
	interval time.Duration
	start    time.Time
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func startProgress(w io.Writer, total int, done func() (int64, int64), interval time.Duration) *progress {
	ctx, cancel := context.WithCancel(context.Background())
	p := &progress{w: w, total: total, done: done, interval: interval, start: time.Now(), cancel: cancel}
	p.wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				p.draw()
			}
		}
	})
	return p
}

func (p *progress) stop() {
	p.cancel()
	p.wg.Wait()
	p.draw()
	fmt.Fprintln(p.w)
}

func (p *progress) draw() {
	d, e := p.done()
	const width = 30
	filled := 0
	if p.total > 0 {
		filled = int(float64(width) * float64(d) / float64(p.total))
	}
	filled = min(filled, width)
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d done, %d errors, %s ", strings.Repeat("=", filled),
		strings.Repeat(" ", width-filled), d, p.total, e, time.Since(p.start).Round(time.Second))
}
