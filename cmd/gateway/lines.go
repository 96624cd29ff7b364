package main

import "bufio"

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
