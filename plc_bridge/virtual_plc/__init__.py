"""The virtual PLC: a PLC program (``plant``: the vehicle plant and the command guard;
``hil_program``, ``speed_loop`` and ``steering_loop``: the program when the simulation is its
plant), the S7 server that serves its data blocks (``server``), its fault-injection channel
(``control``) and its command line (``cli``). Pure below ``server``; imports only the bottom modules
of ``plc_bridge``."""
