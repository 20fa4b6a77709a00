/*
 * Thread fences for memory another process reads or writes (a peer's
 * mapped shared memory), where no atomic of this process pairs with them.
 *
 * GCC's ThreadSanitizer rejects __atomic_thread_fence (-Wtsan). Its builds
 * get a compiler barrier instead: on x86, where they run, an acquire or a
 * release fence is no more than that, and the other side of these fences is
 * another process, which the sanitizer does not see anyway. A full fence
 * there is a locked exchange on a word of the caller's stack, which x86
 * orders as it orders `mfence`.
 */
#ifndef RDMX_UTIL_FENCE_H
#define RDMX_UTIL_FENCE_H

#if defined(__SANITIZE_THREAD__)
#define RDMX_FENCE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RDMX_FENCE_TSAN 1
#endif
#endif

#ifdef RDMX_FENCE_TSAN
#define rdmx_fence_acquire() __atomic_signal_fence(__ATOMIC_ACQUIRE)
#define rdmx_fence_release() __atomic_signal_fence(__ATOMIC_RELEASE)
static inline void rdmx_fence_full(void)
{
    unsigned w = 0;

    (void)__atomic_exchange_n(&w, 1u, __ATOMIC_SEQ_CST);
}
#else
#define rdmx_fence_acquire() __atomic_thread_fence(__ATOMIC_ACQUIRE)
#define rdmx_fence_release() __atomic_thread_fence(__ATOMIC_RELEASE)
#define rdmx_fence_full()    __atomic_thread_fence(__ATOMIC_SEQ_CST)
#endif

#endif /* RDMX_UTIL_FENCE_H */
