//go:build unix

package testenv

import (
	"errors"
	"os"
	"syscall"
)

// lockShared takes a shared flock on f, waiting for an exclusive holder to let go.
func lockShared(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_SH) }

// tryLockExclusive takes an exclusive flock on f if no one else holds a lock on it.
func tryLockExclusive(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

func unlock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
