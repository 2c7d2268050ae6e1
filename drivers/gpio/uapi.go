package gpio

import "unsafe"

// The GPIO character device's v2 uAPI, as in linux/gpio.h (Linux 5.10+).
// Every 64-bit field of these structs sits at an offset that is a multiple
// of 8 and every size is a multiple of 8, so the Go layout is the C layout on
// arm (where Go aligns uint64 to 4) as well as on arm64 and amd64. Sizes and
// offsets are checked in uapi_test.go and the sizes again at compile time
// below, on every architecture the package is built for.

const (
	maxNameSize = 32 // GPIO_MAX_NAME_SIZE
	maxLines    = 64 // GPIO_V2_LINES_MAX
	maxAttrs    = 10 // GPIO_V2_LINE_NUM_ATTRS_MAX
)

// gpio_v2_line_flag
const (
	flagUsed           = 1 << 0
	flagActiveLow      = 1 << 1
	flagInput          = 1 << 2
	flagOutput         = 1 << 3
	flagBiasPullUp     = 1 << 8
	flagBiasPullDown   = 1 << 9
	flagBiasDisabled   = 1 << 10
	attrIDOutputValues = 2 // GPIO_V2_LINE_ATTR_ID_OUTPUT_VALUES
)

// gpiochip_info
type chipInfo struct {
	Name  [maxNameSize]byte
	Label [maxNameSize]byte
	Lines uint32
}

// gpio_v2_line_values: bit i of Bits is the value of the request's line i,
// for the lines whose bit is set in Mask.
type lineValues struct {
	Bits uint64
	Mask uint64
}

// gpio_v2_line_attribute: Value is the union of flags, values and
// debounce_period_us.
type lineAttribute struct {
	ID      uint32
	Padding uint32
	Value   uint64
}

// gpio_v2_line_config_attribute
type lineConfigAttribute struct {
	Attr lineAttribute
	Mask uint64
}

// gpio_v2_line_config
type lineConfig struct {
	Flags    uint64
	NumAttrs uint32
	Padding  [5]uint32
	Attrs    [maxAttrs]lineConfigAttribute
}

// gpio_v2_line_request
type lineRequest struct {
	Offsets         [maxLines]uint32
	Consumer        [maxNameSize]byte
	Config          lineConfig
	NumLines        uint32
	EventBufferSize uint32
	Padding         [5]uint32
	Fd              int32
}

// gpio_v2_line_info
type lineInfo struct {
	Name     [maxNameSize]byte
	Consumer [maxNameSize]byte
	Offset   uint32
	NumAttrs uint32
	Flags    uint64
	Attrs    [maxAttrs]lineAttribute
	Padding  [4]uint32
}

// The sizes linux/gpio.h gives; the ioctl numbers encode them.
const (
	chipInfoSize    = 68
	lineValuesSize  = 16
	lineConfigSize  = 272
	lineRequestSize = 592
	lineInfoSize    = 256
)

// Compile-time size checks: an array length below zero does not compile.
var (
	_ [chipInfoSize - unsafe.Sizeof(chipInfo{})]byte
	_ [unsafe.Sizeof(chipInfo{}) - chipInfoSize]byte
	_ [lineValuesSize - unsafe.Sizeof(lineValues{})]byte
	_ [unsafe.Sizeof(lineValues{}) - lineValuesSize]byte
	_ [lineConfigSize - unsafe.Sizeof(lineConfig{})]byte
	_ [unsafe.Sizeof(lineConfig{}) - lineConfigSize]byte
	_ [lineRequestSize - unsafe.Sizeof(lineRequest{})]byte
	_ [unsafe.Sizeof(lineRequest{}) - lineRequestSize]byte
	_ [lineInfoSize - unsafe.Sizeof(lineInfo{})]byte
	_ [unsafe.Sizeof(lineInfo{}) - lineInfoSize]byte
)

// The ioctl numbers, _IOR and _IOWR of asm-generic/ioctl.h (which arm,
// arm64, x86 and riscv share): direction, size, type 0xB4, number.
const (
	iocRead      = 2
	iocReadWrite = 3

	ioctlChipInfo  = iocRead<<30 | chipInfoSize<<16 | 0xB4<<8 | 0x01         // GPIO_GET_CHIPINFO_IOCTL
	ioctlLineInfo  = iocReadWrite<<30 | lineInfoSize<<16 | 0xB4<<8 | 0x05    // GPIO_V2_GET_LINEINFO_IOCTL
	ioctlGetLine   = iocReadWrite<<30 | lineRequestSize<<16 | 0xB4<<8 | 0x07 // GPIO_V2_GET_LINE_IOCTL
	ioctlGetValues = iocReadWrite<<30 | lineValuesSize<<16 | 0xB4<<8 | 0x0E  // GPIO_V2_LINE_GET_VALUES_IOCTL
	ioctlSetValues = iocReadWrite<<30 | lineValuesSize<<16 | 0xB4<<8 | 0x0F  // GPIO_V2_LINE_SET_VALUES_IOCTL
)

// cstring returns a NUL-terminated name field as a string.
func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
