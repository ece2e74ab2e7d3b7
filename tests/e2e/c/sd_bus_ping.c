/* An sd-bus client for the restart tests: connects to the bus at argv[1],
 * prints "ready", then calls org.freedesktop.DBus.Peer.Ping on the bus and
 * org.freedesktop.DBus.GetNameOwner on its own unique name in a loop until
 * its standard input is closed; then prints "calls N" and exits 0. Any
 * error is printed and ends it with status 1. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

static int fail(const char *what, int r, const sd_bus_error *error) {
    fprintf(stderr, "%s: %s (%s)\n", what,
            error && error->message ? error->message : strerror(-r),
            error && error->name ? error->name : "-");
    return 1;
}

static int stdin_closed(void) {
    struct pollfd p = {.fd = 0, .events = POLLIN};
    char byte;
    if (poll(&p, 1, 0) <= 0)
        return 0;
    return read(0, &byte, 1) <= 0;
}

int main(int argc, char **argv) {
    sd_bus *bus = NULL;
    const char *unique = NULL;
    unsigned long calls = 0;
    int r;

    if (argc != 2) {
        fprintf(stderr, "usage: %s ADDRESS\n", argv[0]);
        return 2;
    }
    if ((r = sd_bus_new(&bus)) < 0)
        return fail("sd_bus_new", r, NULL);
    if ((r = sd_bus_set_address(bus, argv[1])) < 0)
        return fail("sd_bus_set_address", r, NULL);
    if ((r = sd_bus_set_bus_client(bus, 1)) < 0)
        return fail("sd_bus_set_bus_client", r, NULL);
    if ((r = sd_bus_start(bus)) < 0)
        return fail("sd_bus_start", r, NULL);
    if ((r = sd_bus_get_unique_name(bus, &unique)) < 0)
        return fail("sd_bus_get_unique_name", r, NULL);
    printf("ready %s\n", unique);
    fflush(stdout);
    while (!stdin_closed()) {
        sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        const char *owner = NULL;
        r = sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                               "org.freedesktop.DBus.Peer", "Ping", &error, NULL, "");
        if (r < 0)
            return fail("Ping", r, &error);
        r = sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                               "org.freedesktop.DBus", "GetNameOwner", &error, &reply, "s",
                               unique);
        if (r < 0)
            return fail("GetNameOwner", r, &error);
        if ((r = sd_bus_message_read(reply, "s", &owner)) < 0)
            return fail("reading GetNameOwner's reply", r, NULL);
        if (strcmp(owner, unique) != 0) {
            fprintf(stderr, "GetNameOwner(%s) = %s\n", unique, owner);
            return 1;
        }
        sd_bus_message_unref(reply);
        calls += 2;
    }
    printf("calls %lu\n", calls);
    sd_bus_flush_close_unref(bus);
    return 0;
}
