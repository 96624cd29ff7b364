// Package harness starts and stops the processes of kvgate's tests, benchmarks and tools
// (test/e2e, test/reliability, tools/bench, and any test that runs a program): free loopback
// ports, building the kvgate binaries once, starting a program with its output captured to a
// log file (Start) or collected (Run), waiting for an HTTP endpoint to become ready with a
// deadline, stopping processes, and proving afterwards that none is left (Survivors).
//
// It does not import package testing, so tools/bench (a program, `go run ./tools/bench`) links
// no test code; every function returns an error and the caller stops what it started with
// (*Process).Stop. Tests use the testing.TB wrappers in internal/testutil, which report failures
// with t.Fatal and stop processes in t.Cleanup.
//
// # Nothing outlives its owner
//
// Every child runs in its own process group, so what it forks (nginx workers, a script's
// commands) can be signalled with it. Stop sends SIGTERM to the group (nginx's fast shutdown
// stops its workers; every kvgate binary drains and exits), waits, then sends SIGKILL. However
// the child ends, even by a SIGKILL the test sent to it alone, the rest of its group gets SIGKILL
// while the child is still unreaped (so its pid, the group id, cannot have been reused), and
// Done is closed only once the group is gone. This matters for nginx: workers do not exit when
// their master is SIGKILLed, and re-parented to PID 1 they keep their listening sockets.
//
// When the harness itself dies (a go test binary at its -timeout, a killed tools/bench), each
// child gets SIGTERM from the kernel (Pdeathsig), which takes nginx's workers down with it.
// What that does not cover: a child that ignores or hangs on SIGTERM then; grandchildren of a
// child that does not stop them on SIGTERM (a shell script's commands); processes that leave
// their group (setsid, daemons); and Pdeathsig fires when the OS thread that started the child
// exits, which Go does only for a goroutine that exits while locked with runtime.LockOSThread.
//
// # Finding what is left
//
// Every child gets KVGATE_TEST_RUN=<run id>/<n> in its environment, and descendants that keep
// their environment inherit it. The run id of a process that was itself started by a harness
// nests below its own marker, so a test that runs tools/bench also finds the bench's simulators
// and gateways. Survivors reports the processes with a marker of this run, plus the members of
// process groups it started that it has not yet seen empty; the second covers nginx, which
// overwrites its environment with its process title. The e2e and reliability test mains and
// tools/bench call it last and fail when anything is left. Not found: nginx workers of a
// harness nested in this one, once that harness is gone (its own check runs before it exits),
// and processes that clear their environment and leave their group.
//
// Launcher builds on these to start the kvgate fleet itself with free loopback ports: simulators
// (optionally publishing KV events with replay, on any 127.0.0.0/8 address), gateway replicas,
// nginx with a given configuration, a Prometheus server, and a dnsmasq answering from a hosts
// file the caller rewrites (DNS discovery); each Start* waits until the process answers.
//
// Nothing here sleeps to synchronise: readiness, a group's exit and survivors are polled with a
// ticker under a deadline, and a process's exit is observed on the channel returned by
// (*Process).Done.
package harness
