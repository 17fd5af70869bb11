package snapshots

import (
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/engrams/engrams/internal/host/hostfs"
)

// A snapshot that destroys its machine (a suspend) leaves nothing here to
// capture again. If the coordinator dies after the upload and before it
// commits the snapshot, its retried command (same snapshot id: the op's)
// would find no machine, and the session would go back to its previous
// snapshot, losing what the machine did since. So the answer of such a
// capture is kept on disk (captures/<session id>.json) until the
// coordinator no longer lists the session as owned or a machine starts for
// it, and a retry that finds no machine gets it again.

const capturesDir = "captures"

// keptCapture is the answer of a capture that destroyed its machine.
type keptCapture struct {
	SnapshotID string          `json:"snapshot_id"`
	Answer     json.RawMessage `json:"answer"` // the SnapshotResponse as sent
}

type keptAnswers struct {
	dataDir string
	log     *slog.Logger
}

func (k keptAnswers) path(sid string) string {
	return filepath.Join(k.dataDir, capturesDir, sid+".json")
}

// KeepAnswer keeps the answer of snapshot snapshotID of sid, which
// destroyed its machine.
func (s *Snapshots) KeepAnswer(sid, snapshotID string, answer json.RawMessage) error {
	rec, err := json.Marshal(keptCapture{SnapshotID: snapshotID, Answer: answer})
	if err != nil {
		return err
	}
	return hostfs.WriteFileSync(filepath.Join(s.kept.dataDir, capturesDir), sid+".json", rec)
}

// KeptAnswer is the kept answer of snapshot snapshotID of sid, if any.
func (s *Snapshots) KeptAnswer(sid, snapshotID string) (json.RawMessage, bool) {
	b, err := os.ReadFile(s.kept.path(sid))
	var kept keptCapture
	if err != nil || json.Unmarshal(b, &kept) != nil || kept.SnapshotID != snapshotID {
		return nil, false
	}
	return kept.Answer, true
}

// ForgetAnswer drops sid's kept answer: a machine starts for it.
func (s *Snapshots) ForgetAnswer(sid string) { s.kept.forget(sid) }

func (k keptAnswers) forget(sid string) {
	err := os.Remove(k.path(sid))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		k.log.Warn("drop a kept capture", "session_id", sid, "err", err)
	}
}

// PruneAnswers drops the kept answers of sessions not in owned.
func (s *Snapshots) PruneAnswers(owned map[string]int64) {
	ents, err := os.ReadDir(filepath.Join(s.kept.dataDir, capturesDir))
	if err != nil {
		return
	}
	for _, e := range ents {
		sid, ok := strings.CutSuffix(e.Name(), ".json")
		if _, own := owned[sid]; ok && !own {
			s.kept.forget(sid)
		}
	}
}
