package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
)

// The line tools `gateway tokenize` and `gateway render` share their shape: flags, then one
// answer line on stdout per input line on stdin, a bad line answered and reported without
// stopping the run.

// parseArgs parses a line tool's flags. When ok is false the tool exits with status: 0 for -h,
// 2 for bad usage (the flag package, or an argument left over, has said why on stderr).
func parseArgs(fs *flag.FlagSet, args []string, stderr io.Writer) (status int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, false
	}
	return 0, true
}

// eachLine reads stdin line by line and writes, for each, what answer appends to buf (reset
// for every line) and a newline to stdout. A line of more than limit bytes is consumed but not
// kept (answer gets tooLong and an empty line), so one bad line costs at most limit bytes of
// memory. It returns the exit status: 1 when reading or writing failed or an answer reported
// failed, else 0. cmd prefixes the messages on stderr.
func eachLine(cmd string, stdin io.Reader, stdout, stderr io.Writer, limit int, answer func(buf, line []byte, tooLong bool) (out []byte, failed bool)) int {
	in := bufio.NewReaderSize(stdin, 64<<10)
	out := bufio.NewWriterSize(stdout, 64<<10)
	var line, buf []byte
	status := 0
	for {
		var readErr error
		var tooLong, failed bool
		line, tooLong, readErr = readLine(in, line, limit)
		if len(line) == 0 && !tooLong {
			if readErr != nil && readErr != io.EOF {
				fmt.Fprintf(stderr, "%s: read stdin: %v\n", cmd, readErr)
				status = 1
			}
			break
		}
		buf, failed = answer(buf[:0], bytes.TrimRight(line, "\r\n"), tooLong)
		if failed {
			status = 1
		}
		if _, err := out.Write(append(buf, '\n')); err != nil {
			fmt.Fprintf(stderr, "%s: write: %v\n", cmd, err)
			return 1
		}
		if cap(line) > 1<<20 { // do not pin a huge buffer after one long line
			line = nil
		}
		if readErr != nil {
			if readErr != io.EOF {
				fmt.Fprintf(stderr, "%s: read stdin: %v\n", cmd, readErr)
				status = 1
			}
			break
		}
	}
	if err := out.Flush(); err != nil {
		fmt.Fprintf(stderr, "%s: write: %v\n", cmd, err)
		return 1
	}
	return status
}

// readLine reads the next line of in (its newline included) into line[:0]. A line longer than
// limit bytes is consumed but not kept: tooLong is set and line is empty, so one bad input line
// costs no more than limit bytes of memory. err is the read error that ended the line (io.EOF
// at the end of the input), as bufio.Reader.ReadSlice reports it.
func readLine(in *bufio.Reader, line []byte, limit int) (_ []byte, tooLong bool, err error) {
	line = line[:0]
	for {
		chunk, err := in.ReadSlice('\n')
		if len(line)+len(chunk) > limit+1 { // +1: the newline itself
			tooLong, line = true, line[:0]
		} else if !tooLong {
			line = append(line, chunk...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return line, tooLong, err
	}
}
