package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// readBenchCorpus returns the chunks of testdata/bench_corpus.jsonl (see
// tools/tokenizer/make_corpus.js) and their total size in bytes.
func readBenchCorpus(tb testing.TB) ([]string, int) {
	tb.Helper()
	f, err := os.Open(filepath.Join("testdata", "bench_corpus.jsonl"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var chunks []string
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var s string
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			tb.Fatal(err)
		}
		chunks = append(chunks, s)
		n += len(s)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return chunks, n
}

// TestBenchCorpusDigest checks the whole benchmark corpus against the reference library: the
// token count and FNV-1a 64 of all ids, written by `node tools/tokenizer/bench.js --digest`.
func TestBenchCorpusDigest(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "bench_corpus_digest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]struct {
		Tokens int    `json:"tokens"`
		FNV    string `json:"fnv1a64"`
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	chunks, _ := readBenchCorpus(t)
	for _, fam := range families {
		t.Run(fam, func(t *testing.T) {
			tk := loadFamily(t, fam)
			h := uint64(0xcbf29ce484222325)
			tokens := 0
			var ids []uint32
			for _, c := range chunks {
				ids, err = tk.Encode(ids[:0], c, false)
				if err != nil {
					t.Fatal(err)
				}
				tokens += len(ids)
				for _, id := range ids {
					for k := range 4 {
						h ^= uint64(byte(id >> (8 * k)))
						h *= 0x100000001b3
					}
				}
			}
			w := want[fam]
			if tokens != w.Tokens || strconv.FormatUint(h, 10) != w.FNV {
				t.Errorf("got %d tokens, fnv %d; want %d tokens, fnv %s", tokens, h, w.Tokens, w.FNV)
			}
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEncode encodes the benchmark corpus (118 chunks of prose and code, 490 KB) chunk by
// chunk into a reused buffer, single-threaded, with a warm word cache (as in a running gateway).
// Besides ns/op and MB/s it reports tokens/s and µs per 1000 tokens by wall time, and Mtok/s by
// CPU time (more stable on a shared machine; compare with bench.js's "by CPU time").
// BenchmarkEncodeCold is the same pass on text the word cache has not seen.
func BenchmarkEncode(b *testing.B) {
	chunks, size := readBenchCorpus(b)
	for _, fam := range families {
		b.Run(fam, func(b *testing.B) {
			tk := loadFamily(b, fam)
			buf := make([]uint32, 0, 1<<16)
			tokens := 0
			for _, c := range chunks { // warm-up, and the token count
				ids, err := tk.Encode(buf[:0], c, false)
				if err != nil {
					b.Fatal(err)
				}
				tokens += len(ids)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, t0 := cpuTime(), time.Now()
			for b.Loop() {
				for _, c := range chunks {
					if _, err := tk.Encode(buf[:0], c, false); err != nil {
						b.Fatal(err)
					}
				}
			}
			wall, cpu := time.Since(t0).Seconds(), (cpuTime() - cpu0).Seconds()
			total := float64(tokens) * float64(b.N)
			b.ReportMetric(total/wall/1e6, "Mtok/s")
			b.ReportMetric(wall/total*1e9, "µs/1000tok")
			b.ReportMetric(total/cpu/1e6, "Mtok/cpu-s")
		})
	}
}

// BenchmarkEncodeCold encodes the benchmark corpus as BenchmarkEncode does, but each pass starts
// with an empty word cache (a fresh one is installed, untimed, before each pass), so every word
// is run through BPE the first time it occurs: the cost of text the gateway has not seen, such
// as a new system prompt or a document. Words that recur within the pass still hit the cache
// after their first occurrence, as they would in a gateway. Compare with bench.js's cold mode,
// which loads a fresh Hugging Face tokenizer (empty BPE cache) before each pass.
func BenchmarkEncodeCold(b *testing.B) {
	chunks, size := readBenchCorpus(b)
	for _, fam := range families {
		b.Run(fam, func(b *testing.B) {
			tk := loadFamily(b, fam)
			warm := tk.cache
			defer func() { tk.cache = warm }() // the shared tokenizer keeps its warm cache
			buf := make([]uint32, 0, 1<<16)
			tokens := 0
			for _, c := range chunks {
				ids, err := tk.Encode(buf[:0], c, false)
				if err != nil {
					b.Fatal(err)
				}
				tokens += len(ids)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			var wall, cpu time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				tk.cache = newWordCache(1 << 18)
				b.StartTimer()
				cpu0, t0 := cpuTime(), time.Now()
				for _, c := range chunks {
					if _, err := tk.Encode(buf[:0], c, false); err != nil {
						b.Fatal(err)
					}
				}
				wall, cpu = wall+time.Since(t0), cpu+cpuTime()-cpu0
			}
			total := float64(tokens) * float64(b.N)
			b.ReportMetric(total/wall.Seconds()/1e6, "Mtok/s")
			b.ReportMetric(wall.Seconds()/total*1e9, "µs/1000tok")
			b.ReportMetric(total/cpu.Seconds()/1e6, "Mtok/cpu-s")
		})
	}
}

// BenchmarkIsNormalized is the NFC check Encode makes on each piece of text (Qwen3 and Llama 3
// normalize with NFC): isNormalized, which skips the ASCII prefix eight bytes at a time before
// asking the norm package, against norm's QuickSpanString alone, on the chunks of the benchmark
// corpus that are all ASCII (most prompt text: English, code, JSON) and on all of them.
func BenchmarkIsNormalized(b *testing.B) {
	chunks, _ := readBenchCorpus(b)
	var ascii []string
	for _, c := range chunks {
		if asciiPrefix(c) == len(c) {
			ascii = append(ascii, c)
		}
	}
	tk := loadFamily(b, "qwen3")
	form := tk.norms[0].form
	for _, in := range []struct {
		name   string
		chunks []string
	}{{"ascii", ascii}, {"all", chunks}} {
		size := 0
		for _, c := range in.chunks {
			size += len(c)
		}
		b.Run(in.name+"/isNormalized", func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				for _, c := range in.chunks {
					_ = tk.isNormalized(c)
				}
			}
		})
		b.Run(in.name+"/QuickSpanString", func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				for _, c := range in.chunks {
					_ = form.QuickSpanString(c) == len(c)
				}
			}
		})
	}
}
