package domain

import (
	"encoding/json"
	"time"
)

// ImageState is whether an image may be used.
type ImageState string

const (
	ImageReady    ImageState = "ready"
	ImageDisabled ImageState = "disabled" // kept as a record; its name is free again
)

// Image is an OCI image enabled for sessions. Its name is unique among
// images that are not disabled.
type Image struct {
	ID           ImageID
	Org          OrgID  // whose it is: its admins curate it, its members start sessions from it
	Name         string // unique among the organisation's live images
	Ref          string // as the user gave it
	Digest       string // resolved manifest digest; "" until pulled
	State        ImageState
	Config       json.RawMessage // env, workdir, memory, vcpus, disk, warmup; opaque here
	CredentialID string          // registry credential; "" for anonymous pulls
	Manifests    json.RawMessage // base snapshot: role -> chunk manifest; nil until captured
	Facts        HostFacts       // host facts of the base snapshot; zero until captured
	BaseID       SnapshotID      // base snapshot id; "" until captured
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// ImageJobKind is what an image job does.
type ImageJobKind string

const (
	ImageJobEnable  ImageJobKind = "enable"
	ImageJobRefresh ImageJobKind = "refresh" // re-pull the tag, enable the new digest
)

// ImageJobState is where an image job is: pending -> materializing ->
// capturing -> ready | failed; imagejobs.Transition is the one rule of its
// changes.
type ImageJobState string

const (
	JobPending       ImageJobState = "pending"
	JobMaterializing ImageJobState = "materializing" // pulling and building the root filesystem
	JobCapturing     ImageJobState = "capturing"     // booting, warming up, taking the base snapshot
	JobReady         ImageJobState = "ready"
	JobFailed        ImageJobState = "failed"
)

// Active reports whether a job in state s still holds its image: at most
// one job per image is active.
func (s ImageJobState) Active() bool {
	return s == JobPending || s == JobMaterializing || s == JobCapturing
}

// ImageJob is one enable or refresh of an image. A runner claims it
// (ClaimJob) for a lease; every claim bumps Epoch, and the runner's writes
// are fenced by the epoch it claimed.
type ImageJob struct {
	ID         ImageJobID
	ImageID    ImageID
	Kind       ImageJobKind
	State      ImageJobState
	Stage      string // finer progress label within the state
	BytesDone  int64
	BytesTotal int64
	Attempts   int    // times the job was claimed
	Error      string // why it failed
	OutputTail string // tail of the warm-up output, kept for failures
	Epoch      int64  // bumped on every claim; 0 until the first
	LeaseUntil time.Time
	Stages     json.RawMessage // stage name -> milliseconds; opaque here, nil until recorded
	Digest     string          // the manifest digest this job resolved; "" until resolved
	Warnings   []string        // what the job wants its users to know (what the image lost); nil: none
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// RegistryCredential is a registry login, sealed by the caller (package
// secret, with the id as associated data); the store never sees it in clear.
type RegistryCredential struct {
	ID        string
	Registry  string // host[:port] it is for
	Username  string
	Sealed    []byte
	CreatedAt time.Time
}
