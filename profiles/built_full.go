//go:build !lite

package profiles

var built = []Profile{Full, Lite, Proxy, Aggregator}
