package mesh

import (
	"errors"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/hashicorp/memberlist"
)

// memberlist v0.7.0 keeps each node's state to itself: the State field of
// the Node values it hands out is never set (hashicorp/memberlist#266), so
// neither suspicion nor the difference between a dead and a departed node
// can be seen through its API. stateReader reads memberlist's node map under
// memberlist's own lock instead. It checks the fields it needs when it is
// made, so a memberlist whose layout differs (go.mod pins v0.7.0) is found at
// start-up, and the mesh then falls back to what the API shows (alive or
// dead, never suspected), saying so in the log.
type stateReader struct {
	lock  *sync.RWMutex
	nodes reflect.Value // map[string]*nodeState
}

// nodeView is memberlist's view of one node.
type nodeView struct {
	state  memberlist.NodeStateType
	change time.Time
}

func newStateReader(ml *memberlist.Memberlist) (*stateReader, error) {
	v := reflect.ValueOf(ml).Elem()
	lock, nodes := v.FieldByName("nodeLock"), v.FieldByName("nodeMap")
	if !lock.IsValid() || lock.Type() != reflect.TypeFor[sync.RWMutex]() {
		return nil, errors.New("memberlist has no nodeLock")
	}
	if !nodes.IsValid() || nodes.Kind() != reflect.Map || nodes.Type().Key().Kind() != reflect.String ||
		nodes.Type().Elem().Kind() != reflect.Pointer || nodes.Type().Elem().Elem().Kind() != reflect.Struct {
		return nil, errors.New("memberlist has no nodeMap of nodes by name")
	}
	ns := nodes.Type().Elem().Elem()
	if f, ok := ns.FieldByName("State"); !ok || f.Type != reflect.TypeFor[memberlist.NodeStateType]() || len(f.Index) != 1 {
		return nil, errors.New("memberlist's node state has no State")
	}
	if f, ok := ns.FieldByName("StateChange"); !ok || f.Type != reflect.TypeFor[time.Time]() {
		return nil, errors.New("memberlist's node state has no StateChange")
	}
	return &stateReader{
		lock:  (*sync.RWMutex)(unsafe.Pointer(lock.UnsafeAddr())),
		nodes: reflect.NewAt(nodes.Type(), unsafe.Pointer(nodes.UnsafeAddr())).Elem(),
	}, nil
}

// read returns memberlist's state of every node it knows. It must not be
// called from a memberlist callback (memberlist holds the lock there).
func (r *stateReader) read() map[string]nodeView {
	r.lock.RLock()
	defer r.lock.RUnlock()
	out := make(map[string]nodeView, r.nodes.Len())
	for it := r.nodes.MapRange(); it.Next(); {
		ns := it.Value().Elem()
		change := ns.FieldByName("StateChange")
		out[it.Key().String()] = nodeView{
			state:  memberlist.NodeStateType(ns.FieldByName("State").Int()),
			change: *(*time.Time)(unsafe.Pointer(change.UnsafeAddr())),
		}
	}
	return out
}

// stateOf maps memberlist's states onto the mesh's.
func stateOf(s memberlist.NodeStateType) State {
	switch s {
	case memberlist.StateAlive:
		return Alive
	case memberlist.StateSuspect:
		return Suspect
	case memberlist.StateLeft:
		return Left
	}
	return Dead
}
