fn main() -> std::process::ExitCode {
    zkcron::cli::main()
}
