/*
 * Echo load generator for benchmarks/transports.py.
 *
 *   echo_client PORT CONNS SIZE WARMUP_MS DURATION_MS SERVER_PID [udp]
 *
 * Opens CONNS connections to 127.0.0.1:PORT. Each connection sends a SIZE-byte message,
 * reads back exactly SIZE bytes (checking they are the bytes it sent), and starts again,
 * for WARMUP_MS and then DURATION_MS milliseconds. One epoll thread drives every
 * connection. With "udp", the connections are connected UDP sockets and each message is
 * one datagram (a lost one leaves its socket idle, which the report counts).
 *
 * Written in C rather than Python because the generator must not be the bottleneck: a
 * Python client needs about as much CPU per message as the Python server it measures, so
 * the server would sit idle part of the time and we would be measuring the client.
 *
 * The server's CPU time (utime + stime from /proc/SERVER_PID/stat, all its threads) is
 * read here, at the very instants the measured window opens and closes, so the CPU and
 * the message count cover exactly the same interval.
 *
 * Prints one JSON object on stdout; exit status 0 unless the arguments or the connect
 * phase are wrong (then the object carries "error").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <fcntl.h>

#define SCRATCH (256 * 1024)

struct conn {
    int fd;
    size_t sent, recvd;
    long window_msgs;  /* messages completed inside the measured window */
    int want_out;      /* EPOLLOUT currently registered */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* utime + stime of a process in clock ticks, or -1 once it is gone. */
static long proc_ticks(const char *path) {
    char buf[1024];
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* The command name (field 2) may contain spaces and ')': fields resume after the last ')'. */
    char *p = strrchr(buf, ')');
    unsigned long ut, st;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (long)(ut + st);
}

static double self_cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static void set_events(int ep, struct conn *c, int want_out) {
    if (c->want_out == want_out) return;
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = want_out;
}

/* Write as much of the current message as the socket takes; <0 on a fatal error. */
static int pump_out(int ep, struct conn *c, const char *msg, size_t size) {
    while (c->sent < size) {
        ssize_t n = write(c->fd, msg + c->sent, size - c->sent);
        if (n < 0) {
            if (errno == EAGAIN) break;
            return -1;
        }
        c->sent += (size_t)n;
    }
    set_events(ep, c, c->sent < size);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 7 && !(argc == 8 && strcmp(argv[7], "udp") == 0)) {
        printf("{\"error\": \"usage: echo_client PORT CONNS SIZE WARMUP_MS DURATION_MS PID [udp]\"}\n");
        return 2;
    }
    int udp = argc == 8;
    int port = atoi(argv[1]), nconns = atoi(argv[2]);
    size_t size = (size_t)atol(argv[3]);
    double warmup = atof(argv[4]) / 1000, duration = atof(argv[5]) / 1000;
    char stat_path[64];
    snprintf(stat_path, sizeof stat_path, "/proc/%s/stat", argv[6]);
    if (nconns <= 0 || size == 0) {
        printf("{\"error\": \"CONNS and SIZE must be positive\"}\n");
        return 2;
    }

    /* A position-dependent pattern, so an echo that drops, repeats or reorders bytes shows. */
    char *msg = malloc(size), *scratch = malloc(SCRATCH);
    for (size_t i = 0; i < size; i++) msg[i] = (char)((i * 7 + (i >> 8)) & 0xff);

    int ep = epoll_create1(0);
    struct conn *conns = calloc((size_t)nconns, sizeof *conns);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    for (int i = 0; i < nconns; i++) {
        int fd = socket(AF_INET, udp ? SOCK_DGRAM : SOCK_STREAM, 0), one = 1;
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
            printf("{\"error\": \"connect #%d: %s\"}\n", i, strerror(errno));
            return 1;
        }
        /* Our side must not add Nagle delays to the server's figures. */
        if (!udp) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        conns[i].fd = fd;
        conns[i].want_out = 1;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = &conns[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }

    struct epoll_event events[256];
    double t_start = now_s(), t_open = t_start + warmup, t_close = t_open + duration;
    double t0 = 0, t1 = 0, cpu0 = 0, cpu1 = 0;
    long ticks0 = -1, ticks1 = -1, total = 0, open_total = 0, corrupt = 0;
    int in_window = 0, alive = nconns, closed = 0;
    char first_error[128] = "";

    for (;;) {
        double t = now_s();
        if (!in_window && t >= t_open) {
            /* The window opens: snapshot everything at the same instant. */
            ticks0 = proc_ticks(stat_path);
            cpu0 = self_cpu_s();
            t0 = now_s();
            open_total = total;
            in_window = 1;
        }
        if (t >= t_close || alive == 0) break;
        int n = epoll_wait(ep, events, 256, 10);
        for (int k = 0; k < n; k++) {
            struct conn *c = events[k].data.ptr;
            if (c->fd < 0) continue;
            int dead = 0;
            if (events[k].events & EPOLLOUT && pump_out(ep, c, msg, size) < 0) dead = errno;
            while (!dead && c->recvd < c->sent) {
                ssize_t r = read(c->fd, scratch, c->sent - c->recvd < SCRATCH ? c->sent - c->recvd : SCRATCH);
                if (r < 0) {
                    if (errno != EAGAIN) dead = errno;
                    break;
                }
                if (r == 0) {
                    dead = -1; /* EOF: the server closed the connection */
                    break;
                }
                if (memcmp(scratch, msg + c->recvd, (size_t)r) != 0) corrupt++;
                c->recvd += (size_t)r;
                if (c->recvd == size) {
                    total++;
                    if (in_window) c->window_msgs++;
                    c->sent = c->recvd = 0;
                    if (pump_out(ep, c, msg, size) < 0) dead = errno;
                }
            }
            if (dead) {
                if (!first_error[0])
                    snprintf(first_error, sizeof first_error, "%s",
                             dead < 0 ? "server closed the connection" : strerror(dead));
                close(c->fd);
                c->fd = -1;
                alive--;
                closed++;
            }
        }
    }
    if (in_window) {
        ticks1 = proc_ticks(stat_path);
        cpu1 = self_cpu_s();
        t1 = now_s();
    }
    int idle = 0;
    for (int i = 0; i < nconns; i++) idle += conns[i].window_msgs == 0;
    printf("{\"messages\": %ld, \"seconds\": %.6f, \"server_ticks\": %ld, \"clk_tck\": %ld, "
           "\"client_cpu_s\": %.6f, \"closed\": %d, \"idle_conns\": %d, \"corrupt\": %ld, "
           "\"in_window\": %s, \"first_error\": \"%s\"}\n",
           in_window ? total - open_total : 0, t1 - t0, (ticks0 >= 0 && ticks1 >= 0) ? ticks1 - ticks0 : -1,
           sysconf(_SC_CLK_TCK), cpu1 - cpu0, closed, idle, corrupt, in_window ? "true" : "false",
           first_error);
    return 0;
}
