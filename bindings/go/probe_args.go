package perfbuf

// #include <stdlib.h>
// #include "shim.h"
import "C"

import "unsafe"

// Probes with fetch arguments: a kprobe or uprobe Event with Args (the
// kernel's dynamic-event syntax, "fd=%di:s32 path=+0(%si):string",
// "ret=$retval:s64") is made through tracefs (kprobe_events,
// uprobe_events) in a group perfbuf_<pid>_<pidns>_<n> and opened as the tracepoint
// the kernel generates: its samples' Field(name) and Fields() give the
// values. The probe goes with its event or set, and the next set of any
// program deletes the groups of processes that are gone. Arguments the
// kernel rejects give EINVAL with the kernel's complaint in the error.

// SetFilter changes the ftrace filter of tracing event id ("" clears it).
// The kernel sets a perf event's filter once, so the event is opened again
// with it on every CPU and target. Errors wrap EINVAL for a filter the
// kernel refuses (nothing changed), EBUSY for an event with a BPF program
// or in a counter group.
func (s *EventSet) SetFilter(id int, filter string) error {
	const op = "SetFilter"
	if err := s.id(op, id); err != nil {
		return err
	}
	var c *C.char
	if filter != "" {
		c = C.CString(filter)
		defer C.free(unsafe.Pointer(c))
	}
	_, err := s.call(op, func(cset *C.struct_perfbuf_events) C.int {
		return C.perfbuf_events_set_filter(cset, C.int(id), c)
	})
	return err
}
