//go:build lite

package profiles

var built = []Profile{Lite}
