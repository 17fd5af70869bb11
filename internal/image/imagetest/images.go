package imagetest

import (
	"archive/tar"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/engrams/engrams/internal/testutil"
)

// Paths on the build machine the builders read.
const (
	// BusyboxPath is where Debian's busybox-static installs its (static) binary.
	BusyboxPath = "/bin/busybox"
	// HostMuslLoader is musl's dynamic loader (and libc) from Debian's musl package.
	HostMuslLoader = "/lib/ld-musl-x86_64.so.1"
)

// What AlpineLike puts in the image.
const (
	// MuslLoader is musl's dynamic loader in the image, the PT_INTERP of MuslHello.
	MuslLoader = "/lib/ld-musl-x86_64.so.1"
	// MuslHello is a dynamically linked musl program; it prints MuslHelloOutput.
	MuslHello       = "/usr/bin/hello-musl"
	MuslHelloOutput = "hello from musl\n"
	// AlpineRelease is the content of /etc/alpine-release.
	AlpineRelease = "3.20.3\n"
)

// defaultPath is the PATH every image's config sets.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func shellConfig() v1.Config {
	return v1.Config{Env: []string{defaultPath}, WorkingDir: "/", Cmd: []string{"/bin/sh"}}
}

// Busybox is a one-layer image of Debian's static busybox with a symlink to
// /bin/busybox for each of its applets (/bin/sh among them), /etc/passwd and
// /etc/group. It skips (fails under CI) without busybox-static.
func Busybox(t testing.TB) v1.Image {
	t.Helper()
	return Image(t, shellConfig(), Layer(t, busyboxEntries(t)...))
}

// busyboxEntries is a minimal busybox root: directories, the binary, its applet
// links and the account files.
func busyboxEntries(t testing.TB) []Entry {
	t.Helper()
	bin := staticBusybox(t)
	ents := []Entry{
		Dir("bin/", 0o755), Dir("dev/", 0o755), Dir("etc/", 0o755), Dir("home/", 0o755),
		Dir("proc/", 0o555), Dir("root/", 0o700), Dir("run/", 0o755), Dir("sbin/", 0o755),
		Dir("sys/", 0o555), Dir("tmp/", 0o1777), Dir("usr/", 0o755), Dir("usr/bin/", 0o755),
		Dir("usr/sbin/", 0o755), Dir("var/", 0o755), Dir("var/tmp/", 0o1777),
		File("bin/busybox", string(bin), 0o755),
		File("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n", 0o644),
		File("etc/group", "root:x:0:\nnogroup:x:65534:\n", 0o644),
	}
	for _, a := range busyboxApplets(t) {
		ents = append(ents, Symlink(a, "/bin/busybox"))
	}
	return ents
}

// staticBusybox reads the host's busybox, which must be statically linked (Debian's
// busybox package, unlike busybox-static, links it against glibc).
func staticBusybox(t testing.TB) []byte {
	t.Helper()
	f, err := elf.Open(BusyboxPath)
	if err != nil {
		testutil.SkipOrFail(t, "no static busybox at %s (install busybox-static, scripts/install-deps.sh): %v", BusyboxPath, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			testutil.SkipOrFail(t, "%s is dynamically linked; install busybox-static (scripts/install-deps.sh)", BusyboxPath)
		}
	}
	b, err := os.ReadFile(BusyboxPath)
	if err != nil {
		t.Fatalf("imagetest: read %s: %v", BusyboxPath, err)
	}
	return b
}

// busyboxApplets lists the applets' install paths ("bin/sh", "usr/bin/awk", …) as the
// binary itself reports them, sorted, without busybox itself and /linuxrc.
func busyboxApplets(t testing.TB) []string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), BusyboxPath, "--list-full").Output()
	if err != nil {
		t.Fatalf("imagetest: %s --list-full: %v", BusyboxPath, err)
	}
	var applets []string
	for _, l := range strings.Fields(string(out)) {
		if strings.Contains(l, "/") && l != "bin/busybox" && !strings.Contains(l, "..") {
			applets = append(applets, strings.TrimPrefix(l, "/"))
		}
	}
	slices.Sort(applets)
	if !slices.Contains(applets, "bin/sh") {
		t.Fatalf("imagetest: %s --list-full has no bin/sh", BusyboxPath)
	}
	return slices.Compact(applets)
}

// MultiLayer is busybox plus three layers that overwrite files, delete files, a
// symlink and a whole directory with whiteouts (.wh.NAME), and replace directories'
// content with opaque markers (.wh..wh..opq), one of them placed after the new file it
// must not hide. MultiLayerTree says what the flattened tree holds.
func MultiLayer(t testing.TB) v1.Image {
	t.Helper()
	l1 := Layer(t,
		Dir("app/", 0o755),
		File("app/keep.txt", "keep v1", 0o644),
		File("app/gone.txt", "whited out in layer 2", 0o644),
		File("app/overwritten.txt", "old", 0o644),
		File("app/reborn.txt", "v1", 0o644),
		Symlink("app/link", "keep.txt"),
		Dir("app/cache/", 0o755),
		File("app/cache/a", "a", 0o644),
		File("app/cache/b", "b", 0o644),
		Dir("app/cache/sub/", 0o755),
		File("app/cache/sub/c", "c", 0o644),
		Dir("opt/", 0o755),
		Dir("opt/tool/", 0o755),
		File("opt/tool/old-1", "old", 0o644),
		File("opt/tool/old-2", "old", 0o644),
		File("etc/motd", "motd v1", 0o644),
		Dir("var/lib/", 0o755),
		Dir("var/lib/olddir/", 0o755),
		File("var/lib/olddir/file", "x", 0o644),
	)
	l2 := Layer(t,
		Whiteout("app/gone.txt"),
		File("app/overwritten.txt", "new", 0o644),
		Whiteout("app/reborn.txt"),
		File("app/cache/fresh", "fresh", 0o644),
		Opaque("app/cache"), // after "fresh": hides only what lower layers put there
		Whiteout("var/lib/olddir"),
		File("etc/motd", "motd v2", 0o644),
	)
	l3 := Layer(t,
		Whiteout("app/link"),
		Opaque("opt/tool"),
		File("app/reborn.txt", "v3", 0o644),
		File("etc/motd", "motd v3", 0o644),
	)
	return Image(t, shellConfig(), Layer(t, busyboxEntries(t)...), l1, l2, l3)
}

// MultiLayerTree is what flattening MultiLayer must give.
func MultiLayerTree() TreeFacts {
	return TreeFacts{
		Files: map[string]string{
			"app/keep.txt":        "keep v1",
			"app/overwritten.txt": "new",
			"app/reborn.txt":      "v3",
			"app/cache/fresh":     "fresh",
			"etc/motd":            "motd v3",
			"etc/group":           "root:x:0:\nnogroup:x:65534:\n",
		},
		Symlinks: map[string]string{"bin/sh": "/bin/busybox"},
		Dirs:     []string{"app", "app/cache", "opt/tool", "var/lib", "tmp"},
		Absent: []string{
			"app/gone.txt", "app/link", "app/cache/a", "app/cache/b", "app/cache/sub",
			"opt/tool/old-1", "opt/tool/old-2", "var/lib/olddir",
			"app/.wh.gone.txt", "app/cache/.wh..wh..opq", "opt/tool/.wh..wh..opq", "var/lib/.wh.olddir",
		},
	}
}

// NoShell is an image of one static binary (busybox, as /usr/local/bin/busybox, its
// entrypoint) and an empty /bin: no /bin/sh.
func NoShell(t testing.TB) v1.Image {
	t.Helper()
	bin := staticBusybox(t)
	cfg := v1.Config{
		Env: []string{defaultPath}, WorkingDir: "/",
		Entrypoint: []string{"/usr/local/bin/busybox", "echo"}, Cmd: []string{"no shell here"},
	}
	return Image(t, cfg, Layer(t,
		Dir("bin/", 0o755), Dir("usr/", 0o755), Dir("usr/local/", 0o755), Dir("usr/local/bin/", 0o755),
		File("usr/local/bin/busybox", string(bin), 0o755),
	))
}

// AlpineLike is a one-layer musl image laid out like Alpine: musl's loader (which is
// also its libc) at MuslLoader with the libc.musl-x86_64.so.1 link, /etc/alpine-release,
// busybox for /bin/sh and its applets, and MuslHello, a dynamically linked musl
// program compiled here with musl-gcc. It skips (fails under CI) without Debian's
// musl and musl-tools packages or busybox-static.
func AlpineLike(t testing.TB) v1.Image {
	t.Helper()
	loader := muslLoader(t)
	hello := muslHello(t)
	ents := append(busyboxEntries(t),
		Dir("lib/", 0o755),
		File(strings.TrimPrefix(MuslLoader, "/"), string(loader), 0o755),
		Symlink("lib/libc.musl-x86_64.so.1", "ld-musl-x86_64.so.1"),
		File(strings.TrimPrefix(MuslHello, "/"), string(hello), 0o755),
		File("etc/alpine-release", AlpineRelease, 0o644),
		File("etc/os-release", "NAME=\"Alpine Linux\"\nID=alpine\nVERSION_ID="+strings.TrimSpace(AlpineRelease)+
			"\nPRETTY_NAME=\"imagetest Alpine-like\"\n", 0o644),
	)
	return Image(t, shellConfig(), Layer(t, ents...))
}

// muslLoader reads the host's musl loader (a symlink into /lib/x86_64-linux-musl on
// Debian), checking it is an ELF shared object.
func muslLoader(t testing.TB) []byte {
	t.Helper()
	f, err := elf.Open(HostMuslLoader)
	if err != nil {
		testutil.SkipOrFail(t, "no musl loader at %s (install musl, scripts/install-deps.sh): %v", HostMuslLoader, err)
	}
	typ := f.Type
	_ = f.Close()
	if typ != elf.ET_DYN {
		t.Fatalf("imagetest: %s is ELF type %v, want a shared object", HostMuslLoader, typ)
	}
	b, err := os.ReadFile(HostMuslLoader)
	if err != nil {
		t.Fatalf("imagetest: read %s: %v", HostMuslLoader, err)
	}
	return b
}

// helloC prints MuslHelloOutput through printf, so the program needs libc at run time.
const helloC = `#include <stdio.h>
int main(void) { printf("hello from %s\n", "musl"); return 0; }
`

// muslHello compiles helloC with musl-gcc, dynamically linked, and checks its
// interpreter is MuslLoader.
func muslHello(t testing.TB) []byte {
	t.Helper()
	cc, err := exec.LookPath("musl-gcc")
	if err != nil {
		testutil.SkipOrFail(t, "musl-gcc not installed (musl-tools, scripts/install-deps.sh)")
	}
	dir := t.TempDir()
	src, out := filepath.Join(dir, "hello.c"), filepath.Join(dir, "hello")
	if err := os.WriteFile(src, []byte(helloC), 0o644); err != nil {
		t.Fatalf("imagetest: write %s: %v", src, err)
	}
	if msg, err := exec.CommandContext(t.Context(), cc, "-Os", "-s", "-o", out, src).CombinedOutput(); err != nil {
		t.Fatalf("imagetest: musl-gcc: %v\n%s", err, msg)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatalf("imagetest: read compiled hello: %v", err)
	}
	defer f.Close()
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				t.Fatalf("imagetest: read PT_INTERP of compiled hello: %v", err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if interp != MuslLoader {
		t.Fatalf("imagetest: musl-gcc built a program with interpreter %q, want %q", interp, MuslLoader)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("imagetest: read compiled hello: %v", err)
	}
	return b
}

// MaliciousKind names one way a layer tries to escape the tree it is flattened into.
type MaliciousKind string

// The kinds of Malicious images. Each would create or link something named EscapeProbe
// outside the target (in the host's /tmp) if a puller followed it.
const (
	// PathTraversal: a file named "../../…/tmp/<probe>".
	PathTraversal MaliciousKind = "path-traversal"
	// AbsoluteName: a file named "/tmp/<probe>".
	AbsoluteName MaliciousKind = "absolute-name"
	// SymlinkEscape: "escape" → "/tmp" (absolute), then the file "escape/<probe>".
	SymlinkEscape MaliciousKind = "symlink-escape"
	// RelativeSymlinkEscape: "a/up" → "../../…/tmp", then the file "a/up/<probe>".
	RelativeSymlinkEscape MaliciousKind = "relative-symlink-escape"
	// HardlinkOutside: "etc/stolen" hard-linked to "../../…/etc/passwd".
	HardlinkOutside MaliciousKind = "hardlink-outside"
	// DeviceNode: the character device "dev/mem" (1:1, the host's physical memory).
	// It is not refused but left out (never created on the puller's host), so it is
	// not among MaliciousKinds.
	DeviceNode MaliciousKind = "device-node"
)

// EscapeProbe is the file name malicious layers try to create outside the target.
const EscapeProbe = "engrams-imagetest-escape-probe"

// MaliciousKinds lists every MaliciousKind a pull refuses (all but DeviceNode).
func MaliciousKinds() []MaliciousKind {
	return []MaliciousKind{PathTraversal, AbsoluteName, SymlinkEscape, RelativeSymlinkEscape, HardlinkOutside}
}

// Malicious is an image whose second layer holds the attack kind names, over a first
// layer with a harmless root (an executable /bin/sh stand-in, /etc/passwd), so a
// pull that refuses it refuses the attack and nothing else.
func Malicious(t testing.TB, kind MaliciousKind) v1.Image {
	t.Helper()
	up := strings.Repeat("../", 24)
	var attack []Entry
	switch kind {
	case PathTraversal:
		attack = []Entry{File(up+"tmp/"+EscapeProbe, "escaped", 0o644)}
	case AbsoluteName:
		attack = []Entry{File("/tmp/"+EscapeProbe, "escaped", 0o644)}
	case SymlinkEscape:
		attack = []Entry{Symlink("escape", "/tmp"), File("escape/"+EscapeProbe, "escaped", 0o644)}
	case RelativeSymlinkEscape:
		attack = []Entry{Dir("a/", 0o755), Symlink("a/up", up+"tmp"), File("a/up/"+EscapeProbe, "escaped", 0o644)}
	case HardlinkOutside:
		attack = []Entry{Hardlink("etc/stolen", up+"etc/passwd")}
	case DeviceNode:
		attack = []Entry{{Name: "dev/mem", Type: tar.TypeChar, Mode: 0o600, Devmajor: 1, Devminor: 1}}
	default:
		t.Fatalf("imagetest: unknown malicious kind %q", kind)
	}
	base := Layer(t,
		Dir("bin/", 0o755), Dir("dev/", 0o755), Dir("etc/", 0o755), Dir("tmp/", 0o1777),
		File("bin/sh", "#!/not/a/shell\n", 0o755),
		File("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n", 0o644),
	)
	return Image(t, shellConfig(), base, Layer(t, attack...))
}

// DebootstrapLike is what `docker import` makes of a debootstrap tree: one layer,
// names starting "./", an empty config (no PATH, no command), and a /dev holding
// device nodes (/dev/console, /dev/null and the rest of debootstrap's, one block
// device) besides its symlinks and directories, with a FIFO in /run. Busybox
// provides /bin/sh. DebootstrapLeftOut lists what a pull leaves out of it.
func DebootstrapLike(t testing.TB) v1.Image {
	t.Helper()
	ents := []Entry{Dir("./", 0o755)}
	for _, e := range busyboxEntries(t) {
		e.Name = "./" + e.Name
		ents = append(ents, e)
	}
	dev := func(name string, typ byte, mode, major, minor int64) Entry {
		return Entry{Name: "./dev/" + name, Type: typ, Mode: mode, Devmajor: major, Devminor: minor}
	}
	ents = append(ents,
		dev("console", tar.TypeChar, 0o600, 5, 1), dev("full", tar.TypeChar, 0o666, 1, 7),
		dev("null", tar.TypeChar, 0o666, 1, 3), dev("ptmx", tar.TypeChar, 0o666, 5, 2),
		dev("random", tar.TypeChar, 0o666, 1, 8), dev("tty", tar.TypeChar, 0o666, 5, 0),
		dev("urandom", tar.TypeChar, 0o666, 1, 9), dev("zero", tar.TypeChar, 0o666, 1, 5),
		dev("loop0", tar.TypeBlock, 0o660, 7, 0),
		Dir("./dev/pts/", 0o755), Dir("./dev/shm/", 0o1777),
		Symlink("./dev/fd", "/proc/self/fd"), Symlink("./dev/stdin", "/proc/self/fd/0"),
		Symlink("./dev/stdout", "/proc/self/fd/1"), Symlink("./dev/stderr", "/proc/self/fd/2"),
		Entry{Name: "./run/initctl", Type: tar.TypeFifo, Mode: 0o600},
		File("./etc/debian_version", "12.8\n", 0o644),
	)
	return Image(t, v1.Config{}, Layer(t, ents...))
}

// DebootstrapLeftOut are the names DebootstrapLike's pull leaves out, sorted.
func DebootstrapLeftOut() []string {
	return []string{"/dev/console", "/dev/full", "/dev/loop0", "/dev/null", "/dev/ptmx", "/dev/random",
		"/dev/tty", "/dev/urandom", "/dev/zero", "/run/initctl"}
}
