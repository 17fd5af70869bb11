package domain

// SessionID names a session (a UUIDv7 string).
type SessionID string

// HostID names a host.
type HostID string

// TaskID names a task.
type TaskID string

func (id SessionID) String() string { return string(id) }
func (id HostID) String() string    { return string(id) }
func (id TaskID) String() string    { return string(id) }
