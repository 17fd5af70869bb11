package guest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
)

// pathParam returns the absolute, cleaned ?path= or writes a 400
// (guestapi.CheckFilePath).
func pathParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := r.URL.Query().Get("path")
	if err := guestapi.CheckFilePath(p); err != nil {
		writeError(w, http.StatusBadRequest, guestapi.FilePathError(p, err))
		return "", false
	}
	return filepath.Clean(p), true
}

// writeFSError maps a file system error to a status: what the path names
// (missing, forbidden, not a directory on the way, a name too long) is the
// caller's to fix; the rest is the daemon's.
func writeFSError(w http.ResponseWriter, action string, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		status = http.StatusNotFound
	case errors.Is(err, fs.ErrPermission):
		status = http.StatusForbidden
	case errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EINVAL),
		errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.EISDIR):
		status = http.StatusBadRequest
	}
	writeError(w, status, fmt.Sprintf("%s: %v", action, err))
}

func (s *Server) handleDownload(w http.ResponseWriter, r *http.Request) {
	p, ok := pathParam(w, r)
	if !ok {
		return
	}
	f, err := os.Open(p)
	if err != nil {
		writeFSError(w, "open", err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		writeFSError(w, "stat", err)
		return
	}
	if st.IsDir() {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s is a directory", p))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if st.Mode().IsRegular() {
		w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	}
	w.WriteHeader(http.StatusOK)
	if st.Mode().IsRegular() {
		_, err = io.CopyN(w, f, st.Size()) // as declared, even if the file grows
	} else {
		_, err = io.Copy(w, f)
	}
	if err != nil {
		s.log.Debug("download interrupted", "path", p, "err", err)
	}
}

func (s *Server) handleUpload(w http.ResponseWriter, r *http.Request) {
	p, ok := pathParam(w, r)
	if !ok {
		return
	}
	mode := fs.FileMode(0o644)
	if m := r.URL.Query().Get("mode"); m != "" {
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil || v > 0o7777 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("mode must be octal permission bits like 0644: %s", guestapi.QuoteInput(m)))
			return
		}
		mode = fs.FileMode(v)
	}
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s is a directory", p))
		return
	}
	if err := writeAtomic(p, mode, r.Body); err != nil {
		writeFSError(w, "upload "+p, err)
		return
	}
	st, err := os.Stat(p)
	if err != nil {
		writeFSError(w, "stat", err)
		return
	}
	writeJSON(w, http.StatusOK, fileInfo(p, st))
}

// writeAtomic writes body to a temporary file next to p and renames it over p.
func writeAtomic(p string, mode fs.FileMode, body io.Reader) (err error) {
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(p)+".upload-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, body); err != nil {
		return fmt.Errorf("receive body: %w", err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	p, ok := pathParam(w, r)
	if !ok {
		return
	}
	st, err := os.Stat(p)
	if err != nil {
		writeFSError(w, "stat", err)
		return
	}
	if !st.IsDir() {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s is not a directory", p))
		return
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		writeFSError(w, "list", err)
		return
	}
	out := make([]guestapi.FileInfo, 0, len(entries))
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, fileInfo(filepath.Join(p, e.Name()), info))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleStat(w http.ResponseWriter, r *http.Request) {
	p, ok := pathParam(w, r)
	if !ok {
		return
	}
	st, err := os.Stat(p)
	if err != nil {
		writeFSError(w, "stat", err)
		return
	}
	writeJSON(w, http.StatusOK, fileInfo(p, st))
}

func fileInfo(p string, st fs.FileInfo) guestapi.FileInfo {
	return guestapi.FileInfo{
		Name:    filepath.Base(p),
		Path:    p,
		Size:    st.Size(),
		Mode:    st.Mode().String(),
		IsDir:   st.IsDir(),
		ModTime: st.ModTime().UTC().Format(time.RFC3339Nano),
	}
}
