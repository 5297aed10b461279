package codec

import (
	"encoding/binary"
	"math"

	"github.com/adaptivetimeout/adaptivetimeout/tracker"
)

// DecodeRecords decodes and validates a records message. The result
// aliases the Decoder's buffers (see Decoder). Errors wrap ErrTooLarge,
// ErrVersion, ErrType, ErrLayout or ErrMalformed.
func (d *Decoder) DecodeRecords(msg []byte) (Records, error) {
	extra, err := d.open(msg, TypeRecords, 4)
	if err != nil {
		return Records{}, err
	}
	b, err := d.decodeBatch()
	if err != nil {
		return Records{}, err
	}
	n, err := d.readArrayLen("manifests", MaxManifests)
	if err != nil {
		return Records{}, err
	}
	ms := d.manifests[:0]
	for i := range n {
		x, err := d.readRecord("manifest", 3)
		if err != nil {
			return Records{}, err
		}
		var m EpochManifest
		if m.Epoch, err = d.readInt("manifest epoch", math.MinInt64, math.MaxInt64); err != nil {
			return Records{}, err
		}
		if i > 0 && m.Epoch <= ms[i-1].Epoch {
			return Records{}, malformed("manifest epochs not ascending")
		}
		if m.Manifest.Records, m.Manifest.Hash, err = d.readCountHash("manifest records", "manifest hash"); err != nil {
			return Records{}, err
		}
		if err := d.finish(x); err != nil {
			return Records{}, err
		}
		ms = append(ms, m)
	}
	d.manifests = ms
	if err := d.closeMessage(extra); err != nil {
		return Records{}, err
	}
	return Records{Batch: b, Manifests: orNil(ms), SentAtMillis: d.sentAt}, nil
}

// readPairs reads a delta-coded (index, count) list of at most countsLen
// pairs into d.buckets and returns the start of the new ones and their
// sum. An empty list is allowed.
func (d *Decoder) readPairs(what string, countsLen int) (int, uint64, error) {
	m, err := d.readArrayLen(what, math.MaxInt)
	if err != nil {
		return 0, 0, err
	}
	switch {
	case m%2 != 0:
		return 0, 0, malformed("%s: odd array of %d elements", what, m)
	case m/2 > countsLen:
		return 0, 0, malformed("%s: %d buckets, layout has %d", what, m/2, countsLen)
	}
	start := len(d.buckets)
	if m == 0 {
		return start, 0, nil
	}
	last := uint64(countsLen - 1)
	idx, err := d.readUint("bucket index", last)
	if err != nil {
		return 0, 0, err
	}
	var sum uint64
	for j := range m / 2 {
		if j > 0 {
			delta, err := d.readCount("bucket index delta", last-idx)
			if err != nil {
				return 0, 0, malformed("%s: %w", what, err)
			}
			idx += delta
		}
		c, err := d.readCount("bucket count", math.MaxUint32)
		if err != nil {
			return 0, 0, err
		}
		sum += c
		d.buckets = append(d.buckets, tracker.Bucket{Index: uint16(idx), Count: uint32(c)})
	}
	return start, sum, nil
}

// readPackedPairs is readPairs for a packed pair list
// (appendPackedPairs): a bin of uvarints, dense, at most countsLen
// buckets, none beyond the layout's last index, no empty run of 0 indexes
// nor one at the end.
func (d *Decoder) readPackedPairs(what string, countsLen int) (int, uint64, error) {
	c, err := d.rd.ReadByte()
	if err != nil {
		return 0, 0, d.fail(what, err)
	}
	var n int
	switch c {
	case 0xc4, 0xc5, 0xc6:
		for range 1 << (c - 0xc4) {
			x, err := d.rd.ReadByte()
			if err != nil {
				return 0, 0, d.fail(what, err)
			}
			n = n<<8 | int(x)
		}
	default:
		return 0, 0, malformed("%s: code %#x, want a bin", what, c)
	}
	if n > d.rd.Len() {
		return 0, 0, malformed("%s: bin of %d bytes, only %d left", what, n, d.rd.Len())
	}
	start := len(d.buckets)
	end := d.rd.Len() - n
	next := func() (uint64, error) {
		v, err := binary.ReadUvarint(&d.rd)
		if err != nil || d.rd.Len() < end {
			return 0, malformed("%s: bad uvarint", what)
		}
		return v, nil
	}
	if n == 0 {
		return start, 0, nil
	}
	idx, err := next()
	switch {
	case err != nil:
		return 0, 0, err
	case idx >= uint64(countsLen):
		return 0, 0, malformed("%s: bucket index %d out of range [0, %d]", what, idx, countsLen-1)
	}
	var sum uint64
	gap := false // the last token was an empty run
	for d.rd.Len() > end {
		v, err := next()
		if err != nil {
			return 0, 0, err
		}
		if v == 0 {
			k, err := next()
			switch {
			case err != nil:
				return 0, 0, err
			case k == 0 || k >= uint64(countsLen):
				return 0, 0, malformed("%s: empty run of %d indexes", what, k)
			}
			idx += k
			gap = true
			continue
		}
		switch {
		case idx >= uint64(countsLen):
			return 0, 0, malformed("%s: bucket index %d out of range [0, %d]", what, idx, countsLen-1)
		case v > math.MaxUint32:
			return 0, 0, malformed("%s: bucket count %d out of range [1, %d]", what, v, uint64(math.MaxUint32))
		}
		sum += v
		d.buckets = append(d.buckets, tracker.Bucket{Index: uint16(idx), Count: uint32(v)})
		idx++
		gap = false
	}
	if gap || len(d.buckets) == start {
		return 0, 0, malformed("%s: ends without a bucket", what)
	}
	return start, sum, nil
}

// DecodeAggregates decodes and validates an aggregates message. The result
// aliases the Decoder's buffers (see Decoder). Errors wrap ErrTooLarge,
// ErrVersion, ErrType, ErrLayout or ErrMalformed.
func (d *Decoder) DecodeAggregates(msg []byte) (Aggregates, error) {
	return d.decodeAggregates(msg, TypeAggregates)
}

// DecodePackedAggregates decodes and validates a packed aggregates message
// (AppendPackedAggregates): the same result as DecodeAggregates of the
// message AppendAggregates makes of it. Errors are DecodeAggregates'.
func (d *Decoder) DecodePackedAggregates(msg []byte) (Aggregates, error) {
	return d.decodeAggregates(msg, TypePackedAggregates)
}

func (d *Decoder) decodeAggregates(msg []byte, t MessageType) (Aggregates, error) {
	var m Aggregates
	extra, err := d.open(msg, t, 3)
	if err != nil {
		return m, err
	}
	var countsLen int
	if m.Layout, countsLen, err = d.readLayout(); err != nil {
		return m, err
	}
	if m.Sender, err = d.readName("sender"); err != nil {
		return m, err
	}
	n, err := d.readArrayLen("aggregates", MaxAggregates)
	if err != nil {
		return m, err
	}
	aggs := d.aggs[:0]
	d.buckets, d.aggSpans = d.buckets[:0], d.aggSpans[:0]
	clear(d.seen)
	for range n {
		a, err := d.readAggregate(countsLen, t == TypePackedAggregates)
		if err != nil {
			return m, err
		}
		a.Layout = m.Layout
		aggs = append(aggs, a)
	}
	// The buckets of each aggregate, now that d.buckets no longer grows.
	for i := range aggs {
		s := d.aggSpans[3*i : 3*i+3]
		aggs[i].Buckets = d.buckets[s[0]:s[1]:s[1]]
		aggs[i].TimedOut = d.buckets[s[1]:s[2]:s[2]]
		if s[1] == s[2] {
			aggs[i].TimedOut = nil
		}
		if s[0] == s[1] {
			aggs[i].Buckets = nil
		}
		if err := checkAggTimedOut(aggs[i].Dest, aggs[i].TimedOut, aggs[i].Buckets); err != nil {
			return Aggregates{}, err
		}
	}
	if err := d.closeMessage(extra); err != nil {
		return Aggregates{}, err
	}
	d.aggs = aggs
	m.Aggregates, m.SentAtMillis = orNil(aggs), d.sentAt
	return m, nil
}

func (d *Decoder) readAggregate(countsLen int, packed bool) (tracker.Aggregate, error) {
	var a tracker.Aggregate
	pairs := d.readPairs
	if packed {
		pairs = d.readPackedPairs
	}
	x, err := d.readRecord("aggregate", 12)
	if err != nil {
		return a, err
	}
	if a.Dest, err = d.readName("aggregate destination"); err != nil {
		return a, err
	}
	if a.Epoch, err = d.readInt("aggregate epoch", math.MinInt64, math.MaxInt64); err != nil {
		return a, err
	}
	if a.Total, err = d.readUint("aggregate total", math.MaxUint64); err != nil {
		return a, err
	}
	b0, sum, err := pairs("aggregate buckets", countsLen)
	if err != nil {
		return a, err
	}
	if sum != a.Total {
		return a, malformed("aggregate %q: total %d, buckets sum to %d", a.Dest, a.Total, sum)
	}
	b1 := len(d.buckets)
	if _, _, err = pairs("aggregate censored", countsLen); err != nil {
		return a, err
	}
	b2 := len(d.buckets)
	flags, err := d.readUint("aggregate flags", 1)
	if err != nil {
		return a, err
	}
	a.CensoringUnknown = flags == 1
	peers, err := d.readUint("aggregate peers", math.MaxUint32)
	if err != nil {
		return a, err
	}
	a.Peers = int(peers)
	if a.SquareSum[0], err = d.readUint("aggregate square sum", math.MaxUint64); err != nil {
		return a, err
	}
	if a.SquareSum[1], err = d.readUint("aggregate square sum", math.MaxUint64); err != nil {
		return a, err
	}
	age, err := d.readUint("aggregate newest", math.MaxUint32)
	if err != nil {
		return a, err
	}
	a.Newest = int64(uint64(a.Epoch) - age)
	if a.Newest > a.Epoch {
		return a, malformed("aggregate %q: newest epoch wraps", a.Dest)
	}
	if a.Coverage.Records, a.Coverage.Hash, err = d.readCountHash("coverage records", "coverage hash"); err != nil {
		return a, err
	}
	if err := d.finish(x); err != nil {
		return a, err
	}
	d.aggSpans = append(d.aggSpans, b0, b1, b2)
	return a, nil
}

// decodeList decodes msg as a message of type t whose known fields are the
// sender's name and a list (what) of at most limit elements, which elem
// reads one by one (given the ones before) into buf[:0], and returns the
// sender and the list; the message's sent_at is then d.sentAt. It is the
// decoding side of appendListHead.
func decodeList[T any](d *Decoder, msg []byte, t MessageType, what string, limit int, buf []T, elem func(before []T) (T, error)) (string, []T, error) {
	extra, err := d.open(msg, t, 2)
	if err != nil {
		return "", nil, err
	}
	sender, err := d.readName("sender")
	if err != nil {
		return "", nil, err
	}
	n, err := d.readArrayLen(what, limit)
	if err != nil {
		return "", nil, err
	}
	list := buf[:0]
	for range n {
		v, err := elem(list)
		if err != nil {
			return "", nil, err
		}
		list = append(list, v)
	}
	if err := d.closeMessage(extra); err != nil {
		return "", nil, err
	}
	return sender, orNil(list), nil
}

// DecodeAggDigest decodes and validates an aggregate digest. The result
// aliases the Decoder's buffers.
func (d *Decoder) DecodeAggDigest(msg []byte) (AggDigest, error) {
	sender, eps, err := decodeList(d, msg, TypeAggDigest, "digest epochs", MaxDigestEpochs, d.digests, func(before []tracker.AggregateDigest) (tracker.AggregateDigest, error) {
		var e tracker.AggregateDigest
		x, err := d.readRecord("digest epoch", 2)
		if err != nil {
			return e, err
		}
		if e.Epoch, err = d.readInt("digest epoch", math.MinInt64, math.MaxInt64); err != nil {
			return e, err
		}
		if len(before) > 0 && e.Epoch <= before[len(before)-1].Epoch {
			return e, malformed("digest epochs not ascending")
		}
		m, err := d.readArrayLen("digest slices", 2*tracker.AggregateSlices)
		if err != nil {
			return e, err
		}
		if m != 2*tracker.AggregateSlices {
			return e, malformed("digest of %d slice values, want %d", m, 2*tracker.AggregateSlices)
		}
		for k := range tracker.AggregateSlices {
			if e.Slices[k].Count, e.Slices[k].Hash, err = d.readCountHash("slice count", "slice hash"); err != nil {
				return e, err
			}
		}
		return e, d.finish(x)
	})
	if err != nil {
		return AggDigest{}, err
	}
	d.digests = eps
	return AggDigest{Sender: sender, Epochs: eps, SentAtMillis: d.sentAt}, nil
}

// DecodeAggEntries decodes and validates an aggregate list or pull (t).
// The result aliases the Decoder's buffers.
func (d *Decoder) DecodeAggEntries(msg []byte, t MessageType) (AggEntries, error) {
	if t != TypeAggList && t != TypeAggPull {
		d.sentAt = 0
		return AggEntries{}, typeErr(t)
	}
	sender, es, err := decodeList(d, msg, t, "entries", MaxAggEntries, d.entries, func([]tracker.AggregateEntry) (tracker.AggregateEntry, error) {
		var a tracker.AggregateEntry
		x, err := d.readRecord("entry", 4)
		if err != nil {
			return a, err
		}
		if a.Dest, err = d.readName("entry destination"); err != nil {
			return a, err
		}
		if a.Epoch, err = d.readInt("entry epoch", math.MinInt64, math.MaxInt64); err != nil {
			return a, err
		}
		if a.Coverage.Records, a.Coverage.Hash, err = d.readCountHash("entry records", "entry hash"); err != nil {
			return a, err
		}
		return a, d.finish(x)
	})
	if err != nil {
		return AggEntries{}, err
	}
	d.entries = es
	return AggEntries{Sender: sender, Entries: es, SentAtMillis: d.sentAt}, nil
}

// DecodeRecordPull decodes and validates a record pull. The result aliases
// the Decoder's buffers.
func (d *Decoder) DecodeRecordPull(msg []byte) (RecordPull, error) {
	sender, eps, err := decodeList(d, msg, TypeRecordPull, "epochs", MaxPullEpochs, d.epochs, func([]int64) (int64, error) {
		return d.readInt("epoch", math.MinInt64, math.MaxInt64)
	})
	if err != nil {
		return RecordPull{}, err
	}
	d.epochs = eps
	return RecordPull{Sender: sender, Epochs: eps, SentAtMillis: d.sentAt}, nil
}
