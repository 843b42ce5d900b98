// How a process's heap treats freed receive buffers.
//
// ZeroMQ allocates one buffer (malloc) for every frame it receives. In
// steady state the next step receives the same frames again, so freed
// buffers stay in the heap and their pages are reused: no page faults per
// step (KeepFreedReceiveBuffers). ShareOneHeap makes every thread allocate
// from the one heap, so the buffers a PS freed after loading the initial
// values (fp32: with a bf16 wire, twice a later step's bytes) serve its
// bf16 copies of the values too, instead of sitting idle in an I/O
// thread's arena. glibc's mallopt; with EEN_KEEP_FREED_MEMORY=0 both leave
// malloc's settings alone. ShareOneHeap must run before threads start.
#pragma once

namespace een {

void KeepFreedReceiveBuffers();
void ShareOneHeap();

}  // namespace een
