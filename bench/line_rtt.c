/*
 * line_rtt — how long one cache line takes to go from one CPU to another
 * and back, now: the machine's state that a shared-memory benchmark
 * depends on most.
 *
 * Two threads, pinned to two CPUs (the first two this process may use, or
 * the two given), take turns on one line: one writes a number, the other
 * waits to see it and answers in a second line, the first waits for that.
 * Each turn is two transfers of a line between the CPUs' caches. It runs
 * ROUNDS turns (default 100,000, ~15-60 ms) and prints the mean round trip
 * in ns:
 *
 *     line_rtt_ns=152 cpus=0,1
 *
 * On a virtual machine the host decides where its virtual CPUs run, and can
 * move them at any time: on the machine docs/PERFORMANCE.md was measured on
 * the figure is ~150 or ~600 ns, now and then ~65, and changes within
 * seconds ("The host's regimes" there); every shared-memory rate follows
 * it. bench/vs-ucx.sh and bench/vs-memcached.sh print it with each round.
 *
 * Usage: line_rtt [ROUNDS [CPU_A CPU_B]]
 * Build (the scripts do this): cc -O2 -pthread -o line_rtt
 *   bench/line_rtt.c
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Alignas(64) uint64_t ping;
static _Alignas(64) uint64_t pong;
static uint64_t rounds = 100000;
static int ready; /* the answerer: 1 pinned, 2 could not pin */

static int pin(int cpu)
{
    cpu_set_t s;

    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return pthread_setaffinity_np(pthread_self(), sizeof(s), &s);
}

static void *answerer(void *arg)
{
    if (pin(*(int *)arg) != 0) {
        __atomic_store_n(&ready, 2, __ATOMIC_RELEASE);
        return NULL;
    }
    __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    for (uint64_t i = 1; i <= rounds; i++) {
        while (__atomic_load_n(&ping, __ATOMIC_ACQUIRE) != i)
            ;
        __atomic_store_n(&pong, i, __ATOMIC_RELEASE);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int cpu[2] = {-1, -1};
    struct timespec t0, t1;
    pthread_t t;
    int r;

    if (argc > 1 && (rounds = strtoull(argv[1], NULL, 10)) == 0) {
        fprintf(stderr, "usage: line_rtt [ROUNDS [CPU_A CPU_B]]\n");
        return 2;
    }
    if (argc > 3) {
        cpu[0] = atoi(argv[2]);
        cpu[1] = atoi(argv[3]);
    } else {
        cpu_set_t s;
        int n = 0;

        if (sched_getaffinity(0, sizeof(s), &s) != 0) {
            perror("line_rtt: sched_getaffinity");
            return 1;
        }
        for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
            if (CPU_ISSET(c, &s))
                cpu[n++] = c;
        if (n < 2) {
            fprintf(stderr, "line_rtt: needs two CPUs\n");
            return 1;
        }
    }
    if (pin(cpu[0]) != 0 || pthread_create(&t, NULL, answerer, &cpu[1]) != 0) {
        fprintf(stderr, "line_rtt: cannot run on CPUs %d and %d\n", cpu[0],
                cpu[1]);
        return 1;
    }
    while ((r = __atomic_load_n(&ready, __ATOMIC_ACQUIRE)) == 0)
        ;
    if (r != 1) {
        pthread_join(t, NULL);
        fprintf(stderr, "line_rtt: cannot run on CPU %d\n", cpu[1]);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint64_t i = 1; i <= rounds; i++) {
        __atomic_store_n(&ping, i, __ATOMIC_RELEASE);
        while (__atomic_load_n(&pong, __ATOMIC_ACQUIRE) != i)
            ;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pthread_join(t, NULL);
    printf("line_rtt_ns=%.0f cpus=%d,%d\n",
           ((double)(t1.tv_sec - t0.tv_sec) * 1e9 +
            (double)(t1.tv_nsec - t0.tv_nsec)) /
               (double)rounds,
           cpu[0], cpu[1]);
    return 0;
}
