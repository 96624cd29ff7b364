// Package admission is the gateway's admission queue (DESIGN.md §16): requests that find every
// eligible worker of their model's pool at its bound wait here, and each slot a worker frees is
// handed to one of them.
//
// Order: priority band first (an integer with vLLM's meaning: lower runs first), then fair
// across client keys within a band, FCFS within a key. Fairness is start-time fair queueing
// (SFQ) over a virtual time counted in prompt tokens: each request of a key is tagged
// start = max(band's virtual time, the key's previous finish) and finish = start + cost, and the
// band serves the smallest start tag. Tokens rather than request counts because a key's share
// of a fleet is its share of prefill work: a key sending 8k-token prompts and one sending
// 200-token prompts at the same request rate should not get the same fleet time. Output tokens
// are not counted: they are unknown until the request ends.
//
// Cache-aware hand-off: Next(w), called when worker w frees a slot, scores the first LookAhead
// requests of the highest non-empty band (in fair order) against w through each request's
// Score callback, and grants the one that loses least by running on w: cached on w beyond
// what its best other worker holds (Fit.Matched − Fit.Elsewhere, in blocks), else cached
// nowhere (a new prefix: some worker must prefill it), else cached on a worker not expected to
// free a slot soon (Fit.Late), and only when the whole look-ahead is cached on workers that are,
// one of those: that copies the prefix here while its own worker frees a slot soon (issue 27:
// taking any request when none of the look-ahead was cached here left most long documents of
// the overload bench on every worker and cost 3 points of hit rate). It still never idles the
// slot: a copy costs one prefill, an idle slot the time to the next hand-off. The look-ahead
// (DefaultLookAhead 32) is what makes the last case rare: with k workers sharing the prefixes
// evenly, all n requests are cached elsewhere with probability ((k−1)/k)^n. A request passed
// over on a worker that suits it as well as it will find soon MaxSkips times goes next on such
// a worker: a key whose prompts share a cached prefix must not overtake another key's for
// ever and undo fairness; a pass-over while its own worker frees a slot soon does not count.
// The age bound (Config.MaxWait) overrides both: a request that has waited longer than it goes
// first, whatever its band, so a low band is never starved forever.
//
// The queue holds no timers and starts no goroutines; Wait runs in the request's own goroutine
// and leaves the queue at once when its context ends (the client went away) or its deadline
// passes. Time is injected (Config.Now, Config.NewTimer) so tests run on a fake clock.
//
// The package imports nothing of the module: the router instantiates Queue with its fleet
// member type and maps the errors to the API's shapes.
package admission
