package firecracker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Request bodies of the Firecracker API calls this backend makes, written
// from the published API description (swagger "definitions"). Only the
// fields used are present.

// MachineConfig is PUT /machine-config (MachineConfiguration).
type MachineConfig struct {
	VCPUCount       int  `json:"vcpu_count"`
	MemSizeMiB      int  `json:"mem_size_mib"`
	SMT             bool `json:"smt"`
	TrackDirtyPages bool `json:"track_dirty_pages,omitempty"`
}

// BootSource is PUT /boot-source.
type BootSource struct {
	KernelImagePath string `json:"kernel_image_path"`
	InitrdPath      string `json:"initrd_path,omitempty"`
	BootArgs        string `json:"boot_args,omitempty"`
}

// Drive is PUT /drives/{drive_id}.
type Drive struct {
	DriveID      string `json:"drive_id"`
	PathOnHost   string `json:"path_on_host"`
	IsRootDevice bool   `json:"is_root_device"`
	IsReadOnly   bool   `json:"is_read_only"`
	CacheType    string `json:"cache_type,omitempty"` // "Unsafe" | "Writeback"
}

// NetworkInterface is PUT /network-interfaces/{iface_id}.
type NetworkInterface struct {
	IfaceID     string `json:"iface_id"`
	HostDevName string `json:"host_dev_name"`
	GuestMAC    string `json:"guest_mac,omitempty"`
}

// Vsock is PUT /vsock.
type Vsock struct {
	GuestCID uint32 `json:"guest_cid"`
	UDSPath  string `json:"uds_path"`
}

// Logger is PUT /logger.
type Logger struct {
	LogPath       string `json:"log_path"`
	Level         string `json:"level,omitempty"` // Error, Warning, Info, Debug, Trace, Off
	ShowLevel     bool   `json:"show_level,omitempty"`
	ShowLogOrigin bool   `json:"show_log_origin,omitempty"`
}

// Metrics is PUT /metrics.
type Metrics struct {
	MetricsPath string `json:"metrics_path"`
}

// Action is PUT /actions (InstanceActionInfo).
type Action struct {
	ActionType string `json:"action_type"` // FlushMetrics, InstanceStart, SendCtrlAltDel
}

// VMState is PATCH /vm.
type VMState struct {
	State string `json:"state"` // Paused | Resumed
}

// SnapshotCreate is PUT /snapshot/create (SnapshotCreateParams).
type SnapshotCreate struct {
	SnapshotType string `json:"snapshot_type,omitempty"` // Full | Diff
	SnapshotPath string `json:"snapshot_path"`
	MemFilePath  string `json:"mem_file_path"`
}

// MemBackend is SnapshotLoadParams.mem_backend.
type MemBackend struct {
	BackendType string `json:"backend_type"` // File | Uffd
	BackendPath string `json:"backend_path"`
}

// VsockOverride is SnapshotLoadParams.vsock_override.
type VsockOverride struct {
	UDSPath string `json:"uds_path"`
}

// SnapshotLoad is PUT /snapshot/load (SnapshotLoadParams).
type SnapshotLoad struct {
	SnapshotPath    string         `json:"snapshot_path"`
	MemBackend      MemBackend     `json:"mem_backend"`
	TrackDirtyPages bool           `json:"track_dirty_pages,omitempty"`
	ResumeVM        bool           `json:"resume_vm"`
	VsockOverride   *VsockOverride `json:"vsock_override,omitempty"`
}

// InstanceInfo is the answer of GET /.
type InstanceInfo struct {
	ID         string `json:"id"`
	State      string `json:"state"` // "Not started", "Running", "Paused"
	VMMVersion string `json:"vmm_version"`
	AppName    string `json:"app_name"`
}

// Enum values used by this backend.
const (
	actionInstanceStart = "InstanceStart"
	statePaused         = "Paused"
	stateResumed        = "Resumed"
	snapFull            = "Full"
	snapDiff            = "Diff"
	memBackendFile      = "File"
	memBackendUffd      = "Uffd"
)

// APIError is a non-2xx answer of the Firecracker API.
type APIError struct {
	Method, Path string
	Status       int
	FaultMessage string // the "fault_message" of Firecracker's Error body, or the raw body
}

func (e *APIError) Error() string {
	return fmt.Sprintf("firecracker %s %s: %d %s: %s", e.Method, e.Path, e.Status, http.StatusText(e.Status), e.FaultMessage)
}

// parseAPIError turns a non-2xx response body into an *APIError.
func parseAPIError(method, path string, status int, body []byte) *APIError {
	e := &APIError{Method: method, Path: path, Status: status}
	var fb struct {
		FaultMessage string `json:"fault_message"`
	}
	if json.Unmarshal(body, &fb) == nil && fb.FaultMessage != "" {
		e.FaultMessage = fb.FaultMessage
	} else {
		e.FaultMessage = string(bytes.TrimSpace(body))
	}
	if e.FaultMessage == "" {
		e.FaultMessage = http.StatusText(status)
	}
	return e
}

// apiClient talks HTTP/1.1 to Firecracker's API Unix socket.
type apiClient struct {
	socket string
	hc     *http.Client
}

func newAPIClient(socket string) *apiClient {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:       1,
		IdleConnTimeout:    10 * time.Second,
		DisableCompression: true,
	}
	return &apiClient{socket: socket, hc: &http.Client{Transport: tr}}
}

func (c *apiClient) close() { c.hc.CloseIdleConnections() }

// do sends one call; body may be nil. out, when non-nil, receives the JSON answer.
func (c *apiClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("firecracker %s %s: encode: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, rd)
	if err != nil {
		return fmt.Errorf("firecracker %s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("firecracker %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("firecracker %s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return parseAPIError(method, path, resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("firecracker %s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

func (c *apiClient) put(ctx context.Context, path string, body any) error {
	return c.do(ctx, http.MethodPut, path, body, nil)
}

func (c *apiClient) patchVM(ctx context.Context, state string) error {
	return c.do(ctx, http.MethodPatch, "/vm", VMState{State: state}, nil)
}

func (c *apiClient) describe(ctx context.Context) (InstanceInfo, error) {
	var info InstanceInfo
	err := c.do(ctx, http.MethodGet, "/", nil, &info)
	return info, err
}

// waitAPI polls GET / until the API socket answers, the process exits
// (exited closes) or ctx ends.
func (c *apiClient) waitAPI(ctx context.Context, exited <-chan struct{}) (InstanceInfo, error) {
	var last error
	for {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		info, err := c.describe(actx)
		cancel()
		if err == nil {
			return info, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return info, fmt.Errorf("wait for api socket %s: %w (last: %v)", c.socket, ctx.Err(), last)
		case <-exited:
			return info, fmt.Errorf("wait for api socket %s: firecracker exited (last: %v)", c.socket, last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// errorsAsAPI is errors.As for *APIError.
func errorsAsAPI(err error) (*APIError, bool) {
	var e *APIError
	ok := errors.As(err, &e)
	return e, ok
}
