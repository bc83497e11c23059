package difftest

import "syscall"

func dup(fd int) (int, error) {
	nfd, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return -1, e
	}
	return int(nfd), nil
}
