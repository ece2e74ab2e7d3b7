fn main() {
    std::process::exit(quickbus_daemon::startup::main());
}
