// Package exepages hands back the pages of the running executable that only
// start-up used.
//
// The kernel maps a file's pages into a process 64 KiB at a time around each
// page touched (fault-around), and package initialisers, the runtime's
// start-up and the manifest's loading touch code, read-only data and the
// function table all over the binary: nearly all of an 18 MB executable is
// resident before the first call. Release drops those pages from the process's
// page tables; they stay in the page cache, and the ones serving needs come
// back on first touch, as they came the first time.
package exepages
