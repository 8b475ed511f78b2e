package ctlfile

// File identity: telling apart the files one name (one inode number) is
// given to over time.

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"zsched/internal/rawsys"

	"golang.org/x/sys/unix"
)

// FileID is the identity of one file, as it was when read: which file a
// name led to then. Files in the spool are named after inode numbers
// (ZMailer's router names a message after its body's inode), and the
// kernel gives a freed inode number to the next new file at once — often
// with the same birth time, the clock being coarse. So a name, or a device
// and inode number, may lead to another file a moment later; Gen is what
// tells them apart.
//
// Gen comes, in order of preference (Src):
//   - IDHandle: the file handle (name_to_handle_at(2)), less its inode
//     number: for ext4, xfs and tmpfs the inode's generation, which the
//     filesystem changes (at random) each time it hands the inode out, so
//     that an NFS client never mistakes a new file for an old one;
//   - IDBirth: the birth time in nanoseconds (statx), where the
//     filesystem has no handles;
//   - IDChange: the status-change time in nanoseconds, where it has no
//     birth time either. It changes whenever the file does (an agent's
//     mark), so a control file changed since its read is not the same by
//     this measure, and is left alone.
//
// The zero FileID means "not known". FileIDs are comparable with ==.
type FileID struct {
	Dev uint64 // st_dev
	Ino uint64
	Gen uint64
	Src IDSource
}

// IDSource says where a FileID's Gen comes from.
type IDSource uint8

// Sources of FileID.Gen.
const (
	IDNone   IDSource = iota // the zero FileID
	IDHandle                 // the file handle's generation
	IDBirth                  // the birth time
	IDChange                 // the status-change time
)

func (s IDSource) String() string {
	switch s {
	case IDNone:
		return "none"
	case IDHandle:
		return "handle"
	case IDBirth:
		return "birth"
	case IDChange:
		return "ctime"
	}
	return "IDSource(" + strconv.Itoa(int(s)) + ")"
}

// Known reports whether id is a file's identity (not the zero FileID).
func (id FileID) Known() bool { return id.Src != IDNone }

func (id FileID) String() string {
	if !id.Known() {
		return "unknown"
	}
	return fmt.Sprintf("dev %d ino %d %s %#x", id.Dev, id.Ino, id.Src, id.Gen)
}

// QueueID is the identity of the message whose control file is name and
// has identity id, for people: the name, a dot and Gen in base 32
// (Crockford's digits, lowercase), e.g. "5308609.3kq7m2c". It is the same
// whenever the file is read (after a restart too), and short enough to
// copy; the name alone is reused within milliseconds, the name with the
// generation is not — a repeat needs the same name and the same 32-bit
// generation, which ext4, xfs and tmpfs draw at random for each new inode.
// Without handles (IDBirth, IDChange) the suffix encodes a time, and is as
// unique as the filesystem's clock is fine. An unknown id gives the name.
func (id FileID) QueueID(name string) string {
	if !id.Known() {
		return name
	}
	var buf [13]byte // 64 bits in 5-bit digits
	i := len(buf)
	g := id.Gen
	for {
		i--
		buf[i] = crockford[g&31]
		g >>= 5
		if g == 0 {
			break
		}
	}
	return name + "." + string(buf[i:])
}

// crockford is Crockford's base-32 digits, lowercase: no i, l, o or u to
// misread when an id is copied by hand.
const crockford = "0123456789abcdefghjkmnpqrstvwxyz"

// QueueID is the message's queue id (FileID.QueueID of its control file):
// what operators and logs name it by.
func (f *File) QueueID() string { return f.Control.QueueID(f.Name) }

// genOf reduces a file handle to what tells its inode's successive files
// apart: the handle less the inode number ino (ext4 and xfs lay a handle
// out as inode then generation, tmpfs as generation then inode, in 32-bit
// words). A handle of up to two words left is taken as is; a longer one
// (btrfs: root and generation) is hashed (FNV-1a). Read and Remove derive
// Gen the same way, so two handles of one file always agree.
func genOf(h *rawsys.FileHandle, ino uint64) uint64 {
	n := int(min(h.Bytes, rawsys.MaxHandleSize)) / 4
	var words [rawsys.MaxHandleSize / 4]uint32
	for i := range n {
		words[i] = binary.NativeEndian.Uint32(h.Data[4*i:])
	}
	rest := words[:n]
	drop := func(w uint32) {
		for i, x := range rest {
			if x == w {
				rest = append(rest[:i], rest[i+1:]...)
				return
			}
		}
	}
	drop(uint32(ino))
	if ino>>32 != 0 {
		drop(uint32(ino >> 32))
	}
	switch len(rest) {
	case 0:
		return 0
	case 1:
		return uint64(rest[0])
	case 2:
		return uint64(rest[0]) | uint64(rest[1])<<32
	}
	const offset, prime = 14695981039346656037, 1099511628211
	sum := uint64(offset)
	for _, w := range rest {
		for k := range 4 {
			sum ^= uint64(byte(w >> (8 * k)))
			sum *= prime
		}
	}
	return sum
}

// noHandles reports whether err from name_to_handle_at means the
// filesystem (or a sandbox around the process) gives no handles.
func noHandles(err error) bool {
	return err == unix.EOPNOTSUPP || err == unix.ENOSYS || err == unix.EPERM || err == unix.EINVAL
}

// identify is the FileID of the file st describes, which is name relative
// to dirfd (AT_EMPTY_PATH: dirfd itself; follow: through a symbolic link,
// as the stat did). It costs one system call (name_to_handle_at), or a
// statx where the filesystem has no handles. ok is false when the name
// led to another file than st by the time of the call (it was replaced in
// between): the caller stats again.
func (c *dirCache) identify(tree, dirfd int, name string, follow bool, st *unix.Stat_t) (id FileID, ok bool, err error) {
	id = FileID{Dev: st.Dev, Ino: st.Ino}
	if !c.fds.noHandles[tree].Load() {
		var h rawsys.FileHandle
		_, err := rawsys.NameToHandleAt(dirfd, name, handleFlags(name, follow), &h)
		switch {
		case err == nil:
			id.Gen, id.Src = genOf(&h, st.Ino), IDHandle
			return id, handleHas(&h, st.Ino), nil
		case noHandles(err):
			c.fds.noHandles[tree].Store(true)
		default:
			return FileID{}, false, err
		}
	}
	id.Gen, id.Src = uint64(st.Ctim.Nano()), IDChange
	var stx unix.Statx_t
	flags := unix.AT_STATX_SYNC_AS_STAT | statFlags(name, follow)
	if err := ignoringEINTR(func() error { return unix.Statx(dirfd, name, flags, unix.STATX_BTIME|unix.STATX_INO, &stx) }); err != nil {
		if err == unix.ENOENT {
			return FileID{}, false, err
		}
		return id, true, nil // no statx: ctime it is
	}
	if stx.Ino != st.Ino {
		return id, false, nil
	}
	if stx.Mask&unix.STATX_BTIME != 0 && (stx.Btime.Sec != 0 || stx.Btime.Nsec != 0) {
		id.Gen, id.Src = uint64(stx.Btime.Sec)*1e9+uint64(stx.Btime.Nsec), IDBirth
	}
	return id, true, nil
}

// handleHas reports whether the handle holds the low word of ino: whether
// it is a handle of the inode a stat found. A layout without the inode
// number in it (none known) always passes.
func handleHas(h *rawsys.FileHandle, ino uint64) bool {
	n := int(min(h.Bytes, rawsys.MaxHandleSize)) / 4
	if n < 2 {
		return true
	}
	for i := range n {
		if binary.NativeEndian.Uint32(h.Data[4*i:]) == uint32(ino) {
			return true
		}
	}
	return false
}

// is reports whether name relative to dirfd (a tree's descriptor, or
// AT_FDCWD and a full path; "": dirfd itself, an open file) still leads to
// the file want: one system call (name_to_handle_at, or a stat without
// handles). A missing file is unix.ENOENT.
func is(dirfd int, name string, follow bool, want FileID) (bool, error) {
	switch want.Src {
	case IDHandle:
		var h rawsys.FileHandle
		if _, err := rawsys.NameToHandleAt(dirfd, name, handleFlags(name, follow), &h); err != nil {
			return false, err
		}
		return handleHas(&h, want.Ino) && genOf(&h, want.Ino) == want.Gen, nil
	case IDBirth:
		var stx unix.Statx_t
		err := ignoringEINTR(func() error {
			return unix.Statx(dirfd, name, unix.AT_STATX_SYNC_AS_STAT|statFlags(name, follow), unix.STATX_BTIME|unix.STATX_INO, &stx)
		})
		if err != nil {
			return false, err
		}
		dev := unix.Mkdev(stx.Dev_major, stx.Dev_minor)
		return dev == want.Dev && stx.Ino == want.Ino &&
			uint64(stx.Btime.Sec)*1e9+uint64(stx.Btime.Nsec) == want.Gen, nil
	case IDChange:
		var st unix.Stat_t
		if err := ignoringEINTR(func() error { return unix.Fstatat(dirfd, name, &st, statFlags(name, follow)) }); err != nil {
			return false, err
		}
		return st.Dev == want.Dev && st.Ino == want.Ino && uint64(st.Ctim.Nano()) == want.Gen, nil
	}
	return true, nil // not known: nothing to check against
}

// handleFlags are name_to_handle_at's flags for name ("": the descriptor
// itself) and follow.
func handleFlags(name string, follow bool) int {
	switch {
	case name == "":
		return unix.AT_EMPTY_PATH
	case follow:
		return unix.AT_SYMLINK_FOLLOW
	}
	return 0
}

// statFlags are fstatat's and statx's flags for name and follow.
func statFlags(name string, follow bool) int {
	switch {
	case name == "":
		return unix.AT_EMPTY_PATH
	case !follow:
		return unix.AT_SYMLINK_NOFOLLOW
	}
	return 0
}
