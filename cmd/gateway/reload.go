package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/discovery"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/router"
)

// reloadDebounce gathers the bursts of events one save makes (an editor's write, rename and
// chmod; a Kubernetes ConfigMap's symlink swap) into one reload.
const reloadDebounce = 100 * time.Millisecond

// reloader applies a changed --config file to a running gateway: the workers (top level and
// per model), the discover specs and the models. The rest of the file needs a restart; a change
// there is logged. A file that does not parse or validate, or a model that does not build (a
// missing tokenizer, a bad template), is rejected whole with a log line, and the configuration
// in force stays. Its methods are called from serve's one waiting goroutine, never at once.
type reloader struct {
	rt      *router.Router
	watcher *discovery.Watcher
	log     *zap.Logger
	reloads *prometheus.CounterVec // outcome
	// cur is the configuration in force; built the models it was built into, by name.
	cur   options
	built map[string]modelOptions
	// seen is the hash of the file content last looked at, so that events which did not
	// change the content (a chmod, a touch) do nothing.
	seen [sha256.Size]byte
}

func newReloader(rt *router.Router, watcher *discovery.Watcher, o options, log *zap.Logger, reg prometheus.Registerer) (*reloader, error) {
	r := &reloader{rt: rt, watcher: watcher, log: log, cur: o, built: map[string]modelOptions{},
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_config_reloads_total",
			Help: "Reloads of the --config file (on change or SIGHUP) by outcome: applied, unchanged, rejected.",
		}, []string{"outcome"})}
	if err := reg.Register(r.reloads); err != nil {
		return nil, fmt.Errorf("gateway: register metrics: %w", err)
	}
	for _, m := range o.Models {
		r.built[m.Name] = m
	}
	r.seen = o.configSum
	return r, nil
}

// configPath returns the --config file of o's command line, or "".
func configPath(o options) string {
	fs := newFlagSet(&options{}, io.Discard)
	if err := fs.Parse(o.args); err != nil {
		return ""
	}
	return fs.Lookup("config").Value.String()
}

// apply puts o's fleet in force: first the models (added, rebuilt when their entry changed,
// removed), so that workers land in their model's pool, then the file's and the flags' workers,
// then the discover specs. At start every model is already in the router (Config.Models).
func (r *reloader) apply(o options) error {
	if err := r.rt.Fleet().SyncWorkers(fleet.OriginFlag, o.workerSpecs(true)); err != nil {
		return err
	}
	if err := r.rt.Fleet().SyncWorkers(fleet.OriginFile, o.workerSpecs(false)); err != nil {
		return err
	}
	return r.watcher.Set(o.discoverSpecs())
}

// reload re-reads the configuration (the file, then the command line's flags over it) when
// force is set (SIGHUP) or the file's content changed, and applies what changed.
func (r *reloader) reload(force bool, why string) {
	path := configPath(r.cur)
	if path == "" {
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		r.reject(why, fmt.Errorf("gateway: config: %w", err))
		return
	}
	sum := sha256.Sum256(b)
	if sum == r.seen && !force {
		return
	}
	r.seen = sum
	o, err := parseOptions(r.cur.args, io.Discard)
	if err != nil {
		r.reject(why, err)
		return
	}
	r.seen = o.configSum // what is parsed, should the file have changed since the read above
	// Build every new or changed model before changing anything.
	changed := map[string]router.Model{}
	for _, m := range o.Models {
		if old, ok := r.built[m.Name]; ok && reflect.DeepEqual(old, m) {
			continue
		}
		rm, err := buildModel(&o, m, r.log)
		if err != nil {
			r.reject(why, err)
			return
		}
		changed[m.Name] = rm
	}
	if restart := restartKeys(r.cur, o); restart {
		r.log.Warn("config keys other than workers, discover and models changed: they take effect on a restart")
	}
	keep := map[string]bool{}
	for _, m := range o.Models {
		keep[m.Name] = true
		if rm, ok := changed[m.Name]; ok {
			if err := r.rt.SetModel(rm); err != nil {
				r.reject(why, err)
				return
			}
			r.built[m.Name] = m
		}
	}
	for name := range r.built {
		if !keep[name] {
			if err := r.rt.RemoveModel(name); err != nil {
				r.log.Warn("model not removed", zap.String("model", name), zap.Error(err))
			}
			delete(r.built, name)
		}
	}
	if err := r.apply(o); err != nil {
		// The models are in force; a worker that could not be built (say an unreadable
		// api_key_file) leaves its origin's workers as they were.
		r.reject(why, err)
		return
	}
	r.cur = o
	r.reloads.WithLabelValues("applied").Inc()
	r.log.Info("config reloaded", zap.String("trigger", why), zap.String("file", path), zap.Int("workers", len(o.allWorkers())),
		zap.Int("discover", len(o.discoverSpecs())), zap.Strings("models", r.rt.ModelNames()))
}

func (r *reloader) reject(why string, err error) {
	r.reloads.WithLabelValues("rejected").Inc()
	r.log.Error("config not reloaded; the configuration in force stays", zap.String("trigger", why), zap.Error(err))
}

// restartKeys reports whether a and b differ in anything but what a reload applies.
func restartKeys(a, b options) bool {
	strip := func(o options) options {
		o.Workers, o.Discover, o.Models, o.workerErr, o.configSum = nil, nil, nil, nil, [sha256.Size]byte{}
		return o
	}
	return !reflect.DeepEqual(strip(a), strip(b))
}

// newConfigWatch starts watching the config file's directory, not the file: editors and
// Kubernetes replace a file by renaming another over it, which ends a watch on the file itself.
// serve calls it before it reports itself up, so that no edit after start goes unnoticed.
func newConfigWatch(path string) (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("gateway: watch config: %w", err)
	}
	if err := w.Add(filepath.Dir(path)); err != nil {
		w.Close()
		return nil, fmt.Errorf("gateway: watch config %s: %w", path, err)
	}
	return w, nil
}

// watchConfig sends on changed (without blocking) after each burst of w's events, until ctx
// is done, and closes w. It sends once at the start too: the file may have changed between
// the read the configuration in force came from and the start of the watch (the reload
// compares contents, so this costs nothing when it did not).
func watchConfig(ctx context.Context, w *fsnotify.Watcher, changed chan<- struct{}, log *zap.Logger) {
	defer w.Close()
	select {
	case changed <- struct{}{}:
	default:
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-w.Events:
			if !ok {
				return
			}
			// Any event in the directory: the reload compares the file's content anyway.
			debounce.Reset(reloadDebounce)
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			log.Warn("config watch error", zap.Error(err))
		case <-debounce.C:
			select {
			case changed <- struct{}{}:
			default: // a reload is pending already
			}
		}
	}
}
