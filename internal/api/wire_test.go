package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
)

// TestWireTypesMatchInternal: each public wire type in apiv1 that repeats a
// host-link or guest type has its JSON exactly. A value of the internal type
// with every field set decodes into the apiv1 type without unknown fields,
// encodes to the same bytes, and decodes back to the same value; the zero
// values encode alike too (the same fields are omitted when empty).
func TestWireTypesMatchInternal(t *testing.T) {
	t.Parallel()
	pairs := []struct {
		internal, public reflect.Type
	}{
		{reflect.TypeFor[domain.HostFacts](), reflect.TypeFor[apiv1.HostFacts]()},
		{reflect.TypeFor[domain.BackendFacts](), reflect.TypeFor[apiv1.BackendFacts]()},
		{reflect.TypeFor[domain.Capacity](), reflect.TypeFor[apiv1.Capacity]()},
		{reflect.TypeFor[guestapi.ExecStart](), reflect.TypeFor[apiv1.ExecStart]()},
		{reflect.TypeFor[guestapi.Control](), reflect.TypeFor[apiv1.ExecControl]()},
		{reflect.TypeFor[guestapi.FileInfo](), reflect.TypeFor[apiv1.FileInfo]()},
		{reflect.TypeFor[guestapi.ExecRequest](), reflect.TypeFor[apiv1.ExecRequest]()},
		{reflect.TypeFor[guestapi.StreamFrame](), reflect.TypeFor[apiv1.ExecFrame]()},
	}
	for _, p := range pairs {
		t.Run(p.public.Name(), func(t *testing.T) {
			t.Parallel()
			full := reflect.New(p.internal)
			fill(full.Elem(), new(int))
			roundTrip(t, full.Interface(), p.public)
			roundTrip(t, reflect.New(p.internal).Interface(), p.public)
		})
	}
}

// roundTrip encodes in, decodes it strictly into a new value of public,
// checks that encodes to the same JSON, and decodes that strictly back
// into in's type to the value in points to.
func roundTrip(t *testing.T, in any, public reflect.Type) {
	t.Helper()
	want, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	pub := reflect.New(public).Interface()
	if err := strictDecode(want, pub); err != nil {
		t.Fatalf("decode %s into %v: %v", want, public, err)
	}
	got, err := json.Marshal(pub)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%v encodes as\n%s\nthe internal %T as\n%s", public, got, in, want)
	}
	back := reflect.New(reflect.TypeOf(in).Elem()).Interface()
	if err := strictDecode(got, back); err != nil {
		t.Fatalf("decode %s into %T: %v", got, in, err)
	}
	if !reflect.DeepEqual(back, in) {
		t.Fatalf("round trip through %v gave %+v, want %+v", public, back, in)
	}
}

func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// fill sets every field of v to a distinct non-zero value (slices and maps
// get two entries), counting with n.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), n)
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(v.Index(i), n)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(k, n)
			fill(e, n)
			v.SetMapIndex(k, e)
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	default:
		panic(fmt.Sprintf("fill: no rule for %v", v.Type()))
	}
}

// TestChannelBytes: the exec WebSocket's channel bytes are the guest's.
func TestChannelBytes(t *testing.T) {
	t.Parallel()
	if apiv1.ChanStdin != guestapi.ChanStdin || apiv1.ChanStdout != guestapi.ChanStdout || apiv1.ChanStderr != guestapi.ChanStderr {
		t.Errorf("apiv1 channels %d/%d/%d, guestapi %d/%d/%d", apiv1.ChanStdin, apiv1.ChanStdout, apiv1.ChanStderr,
			guestapi.ChanStdin, guestapi.ChanStdout, guestapi.ChanStderr)
	}
}

// TestHostFactsOut: an image's base snapshot facts are shown with the JSON
// the host reported, every field carried over.
func TestHostFactsOut(t *testing.T) {
	t.Parallel()
	if hostFactsOut(nil) != nil {
		t.Error("hostFactsOut(nil) is not nil")
	}
	for _, f := range []*domain.HostFacts{{}, {Backend: domain.BackendFacts{Name: "qemu"}}, filled[domain.HostFacts]()} {
		want, _ := json.Marshal(f)
		got, _ := json.Marshal(hostFactsOut(f))
		if !bytes.Equal(got, want) {
			t.Errorf("hostFactsOut(%+v) encodes as\n%s\nwant\n%s", f, got, want)
		}
	}
}

func filled[T any]() *T {
	v := new(T)
	fill(reflect.ValueOf(v).Elem(), new(int))
	return v
}
