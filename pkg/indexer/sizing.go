package indexer

import "math/bits"

// Sizing of the open-addressing tables (table, u64map). Their slots are most of the index's
// memory, so they are kept between 64% and 80% full: they grow by a quarter when an insert
// would pass 80%, and shrink by half below 12.5%. Linear probing stays short at that load (about
// 3 slots for a hit, 13 for a miss at the very top), and any multiple of 8 is a valid size
// because a slot's home is the multiply-high of its hash by the size (reduce), not a mask. A
// power-of-two table that doubles at 75% is 56% full on average, 38% just after it grew.

// overLoaded reports whether n entries in size slots exceed the 80% maximum load.
func overLoaded(n, size int) bool { return n*5 > size*4 }

// underLoaded reports whether a table of size slots holding n entries should shrink.
func underLoaded(n, size int) bool { return size > 64 && n*8 < size }

// grownSize is the size after size, a quarter larger, a multiple of 8.
func grownSize(size int) int { return (size + size/4 + 7) &^ 7 }

// shrunkSize is half of size, a multiple of 8, at least 8.
func shrunkSize(size int) int { return max((size/2)&^7, 8) }

// reduce maps h to [0, n) by Lemire's multiply-high: uniform when h is.
func reduce(h, n uint64) uint64 {
	hi, _ := bits.Mul64(h, n)
	return hi
}
