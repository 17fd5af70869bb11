package domain

// SessionID names a session (a UUIDv7 string).
type SessionID string

// HostID names a host.
type HostID string

// TaskID names a task.
type TaskID string

// ProfileID names a profile.
type ProfileID string

// SecretID names a secret.
type SecretID string

// ImageID names an image.
type ImageID string

// ImageJobID names an image job.
type ImageJobID string

// SnapshotID names a committed snapshot: a session's, or an image's base.
type SnapshotID string

func (id SessionID) String() string  { return string(id) }
func (id HostID) String() string     { return string(id) }
func (id TaskID) String() string     { return string(id) }
func (id ProfileID) String() string  { return string(id) }
func (id SecretID) String() string   { return string(id) }
func (id ImageID) String() string    { return string(id) }
func (id ImageJobID) String() string { return string(id) }
func (id SnapshotID) String() string { return string(id) }
