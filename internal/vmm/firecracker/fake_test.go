package firecracker

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// The fake Firecracker API below encodes facts from Firecracker's
// published API description (src/firecracker/swagger/firecracker.yaml
// and docs/snapshotting/snapshot-support.md), written by hand: the body
// schemas (fields, types, required fields, enums) and the ordering rules
// ("Pre-boot only", "Post-boot only", snapshot/create on a Paused VM,
// snapshot/load only on a fresh process before anything but the logger
// and metrics).

type kind int

const (
	kString kind = iota
	kBool
	kInt
	kObject
	kArray
)

type field struct {
	kind     kind
	required bool
	enum     []string
	min, max int    // for kInt when max > 0
	object   string // schema name for kObject
}

const req = true

func str(required bool, enum ...string) field {
	return field{kind: kString, required: required, enum: enum}
}
func boolean() field { return field{kind: kBool} }

// schemas are the swagger definitions the backend's calls use.
func schemas() map[string]map[string]field {
	return map[string]map[string]field{
		"MachineConfiguration": {
			"vcpu_count": {kind: kInt, required: true, min: 1, max: 32}, "mem_size_mib": {kind: kInt, required: true},
			"smt": boolean(), "track_dirty_pages": boolean(), "cpu_template": str(false),
			"huge_pages": str(false, "None", "Transparent", "2M"),
		},
		"BootSource": {"kernel_image_path": str(req), "initrd_path": str(false), "boot_args": str(false)},
		"Drive": {
			"drive_id": str(req), "is_root_device": {kind: kBool, required: true}, "partuuid": str(false),
			"cache_type": str(false, "Unsafe", "Writeback"), "is_read_only": boolean(), "path_on_host": str(false),
			"rate_limiter": {kind: kObject}, "io_engine": str(false, "Sync", "Async"), "socket": str(false),
		},
		"NetworkInterface": {
			"iface_id": str(req), "host_dev_name": str(req), "guest_mac": str(false),
			"mtu": {kind: kInt, min: 68, max: 65535}, "rx_rate_limiter": {kind: kObject}, "tx_rate_limiter": {kind: kObject},
		},
		"Vsock":                {"guest_cid": {kind: kInt, required: true, min: 3, max: 1 << 31}, "uds_path": str(req), "vsock_id": str(false)},
		"Logger":               {"level": str(false, "Error", "Warning", "Info", "Debug", "Trace", "Off"), "log_path": str(false), "show_level": boolean(), "show_log_origin": boolean(), "module": str(false)},
		"Metrics":              {"metrics_path": str(req), "emit_id": boolean(), "properties": {kind: kObject}},
		"InstanceActionInfo":   {"action_type": str(req, "FlushMetrics", "InstanceStart", "SendCtrlAltDel")},
		"Vm":                   {"state": str(req, "Paused", "Resumed")},
		"SnapshotCreateParams": {"mem_file_path": str(req), "snapshot_path": str(req), "snapshot_type": str(false, "Full", "Diff")},
		"SnapshotLoadParams": {
			"snapshot_path": str(req), "enable_diff_snapshots": boolean(), "track_dirty_pages": boolean(),
			"mem_file_path": str(false), "mem_backend": {kind: kObject, object: "MemoryBackend"}, "resume_vm": boolean(),
			"network_overrides": {kind: kArray}, "vsock_override": {kind: kObject, object: "VsockOverride"},
			"clock_realtime": boolean(), "huge_pages": str(false, "Snapshot", "None", "Transparent", "2M"),
		},
		"MemoryBackend": {"backend_type": str(req, "File", "Uffd"), "backend_path": str(req)},
		"VsockOverride": {"uds_path": str(req)},
	}
}

// validate checks body against schema name; it returns the violations.
func validate(all map[string]map[string]field, name string, body map[string]any) []string {
	sc := all[name]
	var bad []string
	for k, f := range sc {
		if _, ok := body[k]; f.required && !ok {
			bad = append(bad, fmt.Sprintf("%s: missing required field %q", name, k))
		}
	}
	for k, v := range body {
		f, ok := sc[k]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s: unknown field %q", name, k))
			continue
		}
		bad = append(bad, checkValue(all, name+"."+k, f, v)...)
	}
	return bad
}

func checkValue(all map[string]map[string]field, where string, f field, v any) []string {
	switch f.kind {
	case kString:
		s, ok := v.(string)
		if !ok {
			return []string{where + ": want a string"}
		}
		if len(f.enum) > 0 && !slices.Contains(f.enum, s) {
			return []string{fmt.Sprintf("%s: %q not in %v", where, s, f.enum)}
		}
	case kBool:
		if _, ok := v.(bool); !ok {
			return []string{where + ": want a boolean"}
		}
	case kInt:
		n, ok := v.(float64)
		if !ok || n != float64(int64(n)) {
			return []string{where + ": want an integer"}
		}
		if f.max > 0 && (int(n) < f.min || int(n) > f.max) {
			return []string{fmt.Sprintf("%s: %v outside [%d, %d]", where, n, f.min, f.max)}
		}
	case kObject:
		o, ok := v.(map[string]any)
		if !ok {
			return []string{where + ": want an object"}
		}
		if f.object != "" {
			return validate(all, f.object, o)
		}
	case kArray:
		if _, ok := v.([]any); !ok {
			return []string{where + ": want an array"}
		}
	}
	return nil
}

// route is one API operation and when it is allowed.
type route struct {
	schema   string
	preBoot  bool // "Pre-boot only"
	postBoot bool // "Post-boot only"
	idField  string
}

func routeFor(method, path string) (route, string, bool) {
	if method == http.MethodPut {
		if id, ok := strings.CutPrefix(path, "/drives/"); ok && id != "" {
			return route{schema: "Drive", preBoot: true, idField: "drive_id"}, id, true
		}
		if id, ok := strings.CutPrefix(path, "/network-interfaces/"); ok && id != "" {
			return route{schema: "NetworkInterface", preBoot: true, idField: "iface_id"}, id, true
		}
	}
	r, ok := map[string]route{
		"PUT /machine-config":  {schema: "MachineConfiguration", preBoot: true},
		"PUT /boot-source":     {schema: "BootSource", preBoot: true},
		"PUT /vsock":           {schema: "Vsock", preBoot: true},
		"PUT /logger":          {schema: "Logger"},
		"PUT /metrics":         {schema: "Metrics"},
		"PUT /actions":         {schema: "InstanceActionInfo"},
		"PATCH /vm":            {schema: "Vm", postBoot: true},
		"PUT /snapshot/create": {schema: "SnapshotCreateParams", postBoot: true},
		"PUT /snapshot/load":   {schema: "SnapshotLoadParams", preBoot: true},
	}[method+" "+path]
	return r, "", ok
}

// fakeFC is a fake Firecracker API server for one process.
type fakeFC struct {
	workdir string
	jailed  bool
	all     map[string]map[string]field

	mu         sync.Mutex
	calls      []string // "METHOD /path" in order, GET / excluded
	bodies     map[string][]map[string]any
	violations []string
	configured []string // pre-boot resources set, besides logger/metrics
	started    bool
	paused     bool
	guest      *fakeGuest
}

func newFakeFC(workdir string, jailed bool) *fakeFC {
	return &fakeFC{workdir: workdir, jailed: jailed, all: schemas(), bodies: map[string][]map[string]any{}}
}

// resolve maps a path Firecracker would open to the host: relative to its
// working directory, and absolute inside the jail when jailed.
func (f *fakeFC) resolve(p string) string {
	if filepath.IsAbs(p) && !f.jailed {
		return p
	}
	return filepath.Join(f.workdir, p)
}

func (f *fakeFC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/" {
		f.mu.Lock()
		state := "Not started"
		if f.started {
			state = map[bool]string{true: "Paused", false: "Running"}[f.paused]
		}
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]string{"id": "fake", "state": state, "vmm_version": "1.16.1", "app_name": "Firecracker"})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	call := r.Method + " " + r.URL.Path
	f.calls = append(f.calls, call)
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		f.reject(w, call+": body is not a JSON object: "+err.Error())
		return
	}
	f.bodies[call] = append(f.bodies[call], body)
	if bad := f.check(call, r.Method, r.URL.Path, body); len(bad) > 0 {
		f.reject(w, strings.Join(bad, "; "))
		return
	}
	if msg := f.apply(call, body); msg != "" {
		f.reject(w, msg)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeFC) reject(w http.ResponseWriter, msg string) {
	f.violations = append(f.violations, msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]string{"fault_message": msg})
}

// check validates the schema and the ordering rules.
func (f *fakeFC) check(call, method, path string, body map[string]any) []string {
	rt, id, ok := routeFor(method, path)
	if !ok {
		return []string{call + ": not an operation of the API"}
	}
	bad := validate(f.all, rt.schema, body)
	if rt.idField != "" && body[rt.idField] != id {
		bad = append(bad, fmt.Sprintf("%s: %s %v differs from the path id %q", call, rt.idField, body[rt.idField], id))
	}
	if rt.preBoot && f.started {
		bad = append(bad, call+": pre-boot only, the microVM is started")
	}
	if rt.postBoot && !f.started {
		bad = append(bad, call+": post-boot only, the microVM is not started")
	}
	switch call {
	case "PUT /snapshot/create":
		if !f.paused {
			bad = append(bad, call+": the microVM must be Paused")
		}
	case "PUT /snapshot/load":
		if len(f.configured) > 0 {
			bad = append(bad, fmt.Sprintf("%s: only on a fresh process, but %v were configured", call, f.configured))
		}
		_, mb := body["mem_backend"]
		_, mf := body["mem_file_path"]
		if mb == mf {
			bad = append(bad, call+": exactly one of mem_backend and mem_file_path")
		}
	case "PUT /actions":
		if body["action_type"] == "InstanceStart" && (f.started || !slices.Contains(f.configured, "PUT /boot-source")) {
			bad = append(bad, call+": InstanceStart needs a boot source on a not yet started microVM")
		}
	case "PUT /logger", "PUT /metrics":
		if slices.Contains(f.calls[:len(f.calls)-1], call) {
			bad = append(bad, call+": already initialized")
		}
	}
	return append(bad, f.checkFiles(call, body)...)
}

// checkFiles checks that every file Firecracker would open exists.
func (f *fakeFC) checkFiles(call string, body map[string]any) []string {
	var paths []string
	switch call {
	case "PUT /boot-source":
		paths = []string{"kernel_image_path", "initrd_path"}
	case "PUT /snapshot/load":
		paths = []string{"snapshot_path"}
		if mb, _ := body["mem_backend"].(map[string]any); mb != nil && mb["backend_type"] == "File" {
			if _, err := os.Stat(f.resolve(fmt.Sprint(mb["backend_path"]))); err != nil {
				return []string{call + ": memory file: " + err.Error()}
			}
		}
	case "PUT /logger":
		paths = []string{"log_path"}
	case "PUT /metrics":
		paths = []string{"metrics_path"}
	default:
		if strings.HasPrefix(call, "PUT /drives/") {
			paths = []string{"path_on_host"}
		}
	}
	var bad []string
	for _, k := range paths {
		if p, ok := body[k].(string); ok {
			if _, err := os.Stat(f.resolve(p)); err != nil {
				bad = append(bad, call+": "+k+": "+err.Error())
			}
		}
	}
	return bad
}

// apply carries out an accepted call.
func (f *fakeFC) apply(call string, body map[string]any) string {
	switch call {
	case "PUT /logger", "PUT /metrics":
	case "PUT /actions":
		if body["action_type"] == "InstanceStart" {
			f.started = true
			return f.startGuest()
		}
	case "PATCH /vm":
		f.paused = body["state"] == "Paused"
	case "PUT /snapshot/create":
		return f.writeSnapshot(body)
	case "PUT /snapshot/load":
		f.started = true
		f.paused = body["resume_vm"] != true
		return f.startGuest()
	default:
		f.configured = append(f.configured, call)
	}
	return ""
}

// Snapshot files the fake writes: the state names the memory it goes
// with; a Full memory file has data at offset 0, a Diff layer is sparse
// with data only at offset 4096.
const fakeMemSize = 1 << 20

func (f *fakeFC) writeSnapshot(body map[string]any) string {
	statePath, memPath := f.resolve(body["snapshot_path"].(string)), f.resolve(body["mem_file_path"].(string))
	kind, _ := body["snapshot_type"].(string)
	if kind == "" {
		kind = "Full"
	}
	if err := os.WriteFile(statePath, []byte("fake-state "+kind), 0o600); err != nil {
		return err.Error()
	}
	mem, err := os.Create(memPath)
	if err != nil {
		return err.Error()
	}
	defer mem.Close()
	off := int64(0)
	if kind == "Diff" {
		off = 4096
	}
	if _, err := mem.WriteAt([]byte("MEM-"+strings.ToUpper(kind)), off); err != nil {
		return err.Error()
	}
	if err := mem.Truncate(fakeMemSize); err != nil {
		return err.Error()
	}
	return ""
}

func (f *fakeFC) startGuest() string {
	uds := ""
	for _, b := range f.bodies["PUT /vsock"] {
		uds = b["uds_path"].(string)
	}
	if len(f.bodies["PUT /snapshot/load"]) > 0 {
		uds = fileVsock // restored from the snapshot's device state
		if vo, ok := f.bodies["PUT /snapshot/load"][0]["vsock_override"].(map[string]any); ok {
			uds = vo["uds_path"].(string)
		}
	}
	if uds == "" {
		return "no vsock device"
	}
	g, err := startFakeGuest(f.resolve(uds), 1024, 1025)
	if err != nil {
		return err.Error()
	}
	f.guest = g
	return ""
}

func (f *fakeFC) stop() {
	f.mu.Lock()
	g := f.guest
	f.mu.Unlock()
	if g != nil {
		g.close()
	}
}

func (f *fakeFC) snapshot() (calls, violations []string, bodies map[string][]map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls), slices.Clone(f.violations), f.bodies
}
