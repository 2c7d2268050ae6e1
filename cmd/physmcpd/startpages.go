package main

import (
	"log/slog"

	"github.com/physmcp/physmcpd/internal/exepages"
)

// releaseStartPages drops the pages of the executable that start-up touched
// (package initialisers, loading the manifest, building the tools) from the
// process once the device is served: about 4 MB of Full's resident memory
// that serving does not use (docs/performance.md, Memory).
func releaseStartPages(logger *slog.Logger) {
	n, err := exepages.Release()
	if err != nil {
		logger.Warn("cannot release start-up pages", "err", err)
		return
	}
	logger.Debug("start-up pages released", "bytes", n)
}
